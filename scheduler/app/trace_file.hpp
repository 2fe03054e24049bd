#pragma once
/// @file trace_file.hpp
/// trace.json in the Chrome trace event format (open it in
/// https://ui.perfetto.dev or chrome://tracing): one process row per rank,
/// one thread row per actor track, an "X" event per span. The file is
/// written whole and atomically (temporary file, then rename) when the run
/// ends, also when it is interrupted or fails, so it is always valid JSON;
/// its size is bounded by experiment.trace_spans per track (a ring buffer
/// keeps each actor's last spans; `otherData.dropped_spans` counts the rest).
///
/// Across processes every rank writes its part next to the results folder
/// (trace-rank<r>.part.json) before the final barrier and rank 0 merges the
/// parts it finds (a rank on another node without a shared file system is
/// listed in `otherData.missing_ranks`). Timestamps are steady_clock, shared
/// by the processes of one machine.

#include "actors/trace.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace gradwire::scheduler {

/// One process's spans: {"events": [...], "dropped": n}; "ts" in
/// microseconds of steady_clock.
nlohmann::json trace_part(const actors::tracer& t, int pid);

/// Writes a rank's part into `dir` for rank 0 to merge.
void write_trace_part(const std::string& dir, int rank, const nlohmann::json& part);

/// Writes `dir`/trace.json from this process's part plus, for ranks 1 ..
/// size-1, the parts found in `dir` (removed once merged). Timestamps start
/// at 0. Never throws: a trace that cannot be written is reported on stderr.
void write_trace(const std::string& dir, nlohmann::json part, int size, const std::string& run_name);

/// Rank 0's trace.json, written by write() or, at the latest, when this
/// goes out of scope (so a run that fails still leaves its trace).
class trace_output {
public:
  trace_output(std::shared_ptr<actors::tracer> t, std::string dir, std::string run_name, int size)
      : t_(std::move(t)), dir_(std::move(dir)), name_(std::move(run_name)), size_(size) {}
  void write() {
    if (t_)
      write_trace(dir_, trace_part(*t_, 0), size_, name_);
    t_.reset();
  }
  ~trace_output() { write(); }
  trace_output(const trace_output&) = delete;
  trace_output& operator=(const trace_output&) = delete;

private:
  std::shared_ptr<actors::tracer> t_;
  std::string dir_, name_;
  int size_;
};

} // namespace gradwire::scheduler
