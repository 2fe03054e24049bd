#pragma once
/// @file cli_options.hpp
/// The command line's subcommands and options, and what they set.

#include "scheduler/app/sample.hpp"
#include "scheduler/runtime/bench_allreduce.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::scheduler {

/// Everything the command line sets.
struct cli_args {
  CLI::App* run = nullptr;
  CLI::App* allreduce = nullptr;
  CLI::App* report = nullptr;
  CLI::App* keys = nullptr;
  CLI::App* eval = nullptr;
  std::string eval_path;
  CLI::App* info = nullptr;
  CLI::App* sample = nullptr;
  CLI::App* export_ = nullptr;
  std::string export_dir;
  bool export_tensorboard = false;
  CLI::App* compare = nullptr;
  CLI::App* replay = nullptr;
  std::string replay_dir;
  std::vector<std::string> compare_runs;
  std::string compare_out;
  gradwire::scheduler::sample_options sampling;
  std::string config_path, out_dir, report_dir, run_procs;
  std::vector<std::string> overrides, sweeps;
  bool quiet = false, no_report = false, force = false;
  std::string resume;
  std::int64_t resume_step = 0;
  int procs = 0; ///< local processes to start; -1: as many as topology.workers
  gradwire::scheduler::allreduce_bench_options ab;
  std::string ab_min = "1K", ab_max = "64M", ab_chunk = "1M", ab_ring_from = "auto";
};

/// Adds every subcommand and its options to `app`, bound to `a`.
void add_commands(CLI::App& app, cli_args& a);

} // namespace gradwire::scheduler
