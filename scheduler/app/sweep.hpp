#pragma once
/// @file sweep.hpp
/// Sweeps: a grid over config keys (`--sweep topology.workers=1,2,4,8
/// --sweep experiment.seed=1,2,3`), every point a normal run in its own
/// folder, then one comparison table (sweep.csv, sweep.md, printed):
/// throughput, speedup and scaling efficiency against the point with the
/// fewest workers, final accuracy and loss, staleness mean and p99 and the
/// slowest workers' p99 (those with the largest slowdown). Points
/// that differ only in experiment.seed are repeats: the table gives their
/// mean and spread (sample standard deviation).

#include "scheduler/app/single_run.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gradwire::scheduler {

struct sweep_axis {
  std::string key;
  std::vector<std::string> values; ///< TOML values as written (quoted strings stay quoted)
  /// Variants ([sweep.variants]; key "variant"): values are labels and
  /// value i stands for the overrides sets[i] ("key=value") instead.
  std::vector<std::vector<std::string>> sets;
  /// Variants, [sweep] paired = true: each variant after the first also
  /// runs as a replay of the first variant's point of the same other
  /// values (its record: the same schedule), in point-NNN-paired/.
  bool paired = false;
};

/// Parses "key=v1,v2,..." (values that are arrays, e.g. model.hidden=[64,32],
/// keep their commas). Throws gradwire::error naming the argument.
sweep_axis parse_sweep(const std::string& text);

/// Runs every point of the grid (in order, the last axis fastest) under
/// `out_dir` (default results/<name>-sweep) and writes the table (rows:
/// one per group of repeats). Returns the sweep's folder.
/// `procs`: 0 runs every point in this process; n > 0 launches each point
/// as a job of n local processes (`--procs n`), -1 as one of as many
/// processes as the point's topology.workers (the scaling study across
/// processes); a point of one worker always runs here.
/// A point that fails (its run throws) is a row marked unfinished, and the
/// other points still run; `failed` receives "point i (label): why" for each.
std::string run_sweep(const std::string& config_path, const std::vector<std::string>& overrides,
                      const std::vector<sweep_axis>& axes, std::string out_dir, const run_options& opts, int procs = 0,
                      std::vector<std::string>* failed = nullptr);

} // namespace gradwire::scheduler
