#pragma once
/// @file results.hpp
/// The results folder (see README "Results"): summary.json, metrics.jsonl
/// and config.toml. metrics.jsonl is appended and flushed as the run goes,
/// so an interrupted run keeps every record written so far; summary.json is
/// written atomically (temporary file, then rename).

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace gradwire::scheduler {

class results_writer {
public:
  /// Creates `dir` (and parents) and starts a fresh metrics.jsonl.
  explicit results_writer(std::string dir);
  const std::string& dir() const { return dir_; }
  /// Appends one JSON record as a line.
  void metric(const nlohmann::json& record);
  void flush() { metrics_.flush(); }
  /// Writes `name` in the folder atomically.
  void write_file(const std::string& name, const std::string& text) const;
  void write_summary(const nlohmann::json& summary) const;

private:
  std::string dir_;
  std::ofstream metrics_;
  int unflushed_ = 0;
};

/// The results-folder rule: a run never writes into a folder that holds
/// another run's (or sweep's) files, so nothing is overwritten or mixed.
/// Throws gradwire::error naming the folder, what it holds and the two
/// ways on: `--out DIR` for a fresh folder, or `--force` to replace it.
/// With `force`, the earlier run's files (and only those) are removed
/// first. `what` is "run" or "sweep".
void claim_results_folder(const std::string& dir, bool force, const std::string& what);

/// summary.json's staleness object: mean, p50, p99, max, count and the
/// histogram itself, from counts per staleness value (index = staleness).
nlohmann::json staleness_summary(const std::vector<std::int64_t>& histogram);

/// Counts per staleness value of `values` (negative values count as 0).
std::vector<std::int64_t> histogram_of(const std::vector<std::int64_t>& values);

} // namespace gradwire::scheduler
