#pragma once
/// @file cli_options.hpp
/// The command line's subcommands and options, and what they set. CLI11
/// is included by cli_options.cpp alone: it is the heaviest header the
/// command line has, and the rest of it needs only what was chosen.

#include "scheduler/app/sample.hpp"
#include "scheduler/runtime/bench_allreduce.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gradwire::scheduler {

/// Everything the command line sets.
struct cli_args {
  std::string command;   ///< the subcommand given: "run", "report", ...
  std::string log_level; ///< --log-level, or "" when not given
  /// Whether `command` is `name`.
  bool chose(const char* name) const { return command == name; }
  std::string eval_path;
  std::string export_dir;
  bool export_tensorboard = false;
  std::string replay_dir;
  std::vector<std::string> compare_runs;
  std::string compare_out;
  gradwire::scheduler::sample_options sampling;
  std::string config_path, out_dir, report_dir, run_procs;
  std::vector<std::string> overrides, sweeps;
  bool quiet = false, no_report = false, force = false;
  std::string resume;
  std::int64_t resume_step = 0;
  std::int64_t batch_steps = 0; ///< gradwire batches --steps (0: the run's own)
  int procs = 0; ///< local processes to start; -1: as many as topology.workers
  gradwire::scheduler::allreduce_bench_options ab;
  std::string ab_min = "1K", ab_max = "64M", ab_chunk = "1M", ab_ring_from = "auto";
};

/// Parses `argv` into `a`: nothing when there is a command to run, else
/// the status to exit with (0 after --help or --version, 2 after a usage
/// error, whose message goes to `*usage_error` when given).
std::optional<int> parse_command_line(int argc, char** argv, cli_args& a, std::string* usage_error);

} // namespace gradwire::scheduler
