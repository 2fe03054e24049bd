#pragma once
/// @file results.hpp
/// The results folder (see README "Results"): summary.json, metrics.jsonl
/// and config.toml. metrics.jsonl is appended and flushed as the run goes,
/// so an interrupted run keeps every record written so far; summary.json is
/// written atomically (temporary file, then rename).
///
/// Out of space (or over a quota, or a file-size limit): metrics.jsonl is
/// cut back to its last whole line, nothing more is written to it, the
/// run is asked to stop (`stop_on_failure`) and failure() says what
/// happened; a file that cannot be written leaves no temporary behind.

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <sys/types.h>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gradwire::scheduler {

class tensorboard_writer;

class results_writer {
public:
  /// Creates `dir` (and parents) and starts a fresh metrics.jsonl, or
  /// with `append` (a resumed run) goes on at its end.
  explicit results_writer(std::string dir, bool append = false);
  const std::string& dir() const { return dir_; }
  ~results_writer();
  results_writer(const results_writer&) = delete;
  results_writer& operator=(const results_writer&) = delete;
  /// Appends one JSON record as a line (whole lines reach the file).
  void metric(const nlohmann::json& record);
  /// From now on, also each record's scalars as TensorBoard events in
  /// tb/ (experiment.tensorboard); `time_offset`: a resumed run's seconds
  /// before, which its records' times include.
  void tensorboard(double time_offset = 0);
  void flush();
  /// Why metrics.jsonl could not be written, or "" (from any thread).
  std::string failure() const;
  /// Whether it could not (cheap enough for every step).
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  /// Raised when writing first fails, so the run stops at its next step.
  void stop_on_failure(std::atomic<bool>* stop) { stop_ = stop; }
  /// Writes `name` in the folder atomically.
  void write_file(const std::string& name, const std::string& text) const;
  /// summary.json, then metrics.csv from metrics.jsonl beside it (a CSV
  /// that does not fit is a warning: the summary is what must).
  void write_summary(const nlohmann::json& summary) const;
  /// The run's id, stamped into summary.json (run_id.hpp).
  void run_id(std::string id) { run_id_ = std::move(id); }
  /// A resumed run: drops metrics.jsonl's records after the checkpoint's
  /// `step` (those of a later step, and those without a step that follow
  /// the first of them: an earlier end's worker summaries), which the
  /// resumed run writes again, so that each step is there once. Returns
  /// how many it dropped.
  std::int64_t cut_after(std::int64_t step);
  /// metrics.jsonl's records as CSV: one row each, a column per scalar field.
  void write_metrics_csv() const;

private:
  void add_tensorboard(const nlohmann::json& record); ///< with mu_ held; a failure ends tb/, not the run
  void flush_tensorboard();                            ///< likewise
  /// Room held on the disk for summary.json from the start, given back
  /// as it is written: a run that filled the disk still says how it ended.
  static constexpr off_t reserve_bytes = 64 << 10;
  std::string dir_, path_, reserve_;
  int fd_ = -1;
  std::string pending_;        ///< whole lines not yet written
  std::uint64_t committed_ = 0; ///< bytes of whole lines in the file
  int unflushed_ = 0;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::string failure_;
  std::atomic<bool> failed_{false};
  std::atomic<bool>* stop_ = nullptr;
  std::unique_ptr<tensorboard_writer> tb_;
  std::string run_id_;
};

/// The results-folder rule: a run owns its folder, so nothing is
/// overwritten or mixed. Refused, with an error naming the folder and the
/// way on: `/` and the home folder; a folder holding any file gradwire did
/// not write (with `force` too); a folder holding another run's (or
/// sweep's) files, unless `force`, which then removes that whole earlier
/// run (checkpoints and record included) first. `what` is "run", "sweep"
/// or "replay".
void claim_results_folder(const std::string& dir, bool force, const std::string& what);

/// The folder of `gradwire compare --out DIR`: refused when it is `/`, the
/// home folder, a run's or a sweep's folder or inside one, or holds files
/// other than a comparison's; an earlier comparison there is replaced only
/// with `force`.
void claim_compare_folder(const std::string& dir, bool force);

/// summary.json's staleness object: mean, p50, p99, max, count and the
/// histogram itself, from counts per staleness value (index = staleness).
nlohmann::json staleness_summary(const std::vector<std::int64_t>& histogram);

/// Counts per staleness value of `values` (negative values count as 0).
std::vector<std::int64_t> histogram_of(const std::vector<std::int64_t>& values);

} // namespace gradwire::scheduler
