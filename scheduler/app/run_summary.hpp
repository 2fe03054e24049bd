#pragma once
/// @file run_summary.hpp
/// What a run of several workers leaves in its results folder once
/// trained: metrics.jsonl's step records as they arrive, the final
/// evaluation and per-worker records, and summary.json.

#include "actors/trace.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/evaluator.hpp"
#include "scheduler/app/progress.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/runtime/job.hpp"
#include "scheduler/runtime/topology.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace gradwire::scheduler {

/// Each worker's metrics windows as (seconds since it started, steps done).
using window_log = std::map<int, std::vector<std::pair<double, std::int64_t>>>;

/// What a finished run is: everything of summary.json.
struct run_facts {
  const run_config& cfg;
  const topology_setup& setup;
  const topology_outcome& res;
  const std::optional<job>& jb;
  models::eval_result eval;
  nlohmann::json time_to_target, step_time, per_worker;
  nlohmann::json staleness_all_ran; ///< staleness of the pushes made while every worker ran
  const window_log* windows = nullptr;
  bool eval_during = false; ///< snapshots evaluated during the run (else after it)
  /// The training set: a label-skewed run's per-worker label histograms.
  const models::dataset* train = nullptr;
  std::int64_t samples = 0;
  double loss = 0, wall_seconds = 0;
  std::int64_t parameters = 0;
  /// `eval` holds an evaluation: the final model's, or for a stopped run
  /// the latest made during it (none: summary.json's final_test_* are null).
  bool evaluated = false;
};

/// The run's records as the workers send them: progress and metrics.jsonl's step records.
struct run_listeners {
  std::function<void(std::int64_t, std::int64_t)> progress;
  std::function<void(const actors::step_metrics&)> metrics;
  std::shared_ptr<window_log> windows = std::make_shared<window_log>();
};

/// The schedule's learning rate at the last update of `step` steps (before
/// any per-update scaling such as staleness_lr or a node group's lr_scale).
double scheduled_lr(const models::optimizer_spec& opt, std::int64_t step);

/// The listeners of a run of `total_steps` (over all workers) whose
/// training clock started at `t_train`; `time_offset`: a resumed run's
/// seconds before; `opt`: the optimizer and schedule (each record's lr).
run_listeners listeners(progress_line& progress, results_writer& out, std::chrono::steady_clock::time_point t_train,
                        std::int64_t total_steps, double time_offset, const models::optimizer_spec& opt);

/// The final model's evaluation and the per-worker records; fills `f`.
void finish_run(run_facts& f, evaluator& ev, results_writer& out, const actors::trace_ref& coord_trace,
                double trained_secs);

/// Seconds from `t` to now.
double since(std::chrono::steady_clock::time_point t);

/// summary.json's content from a finished run's facts.
nlohmann::json summary_of(const run_facts& f);

/// summary.json's status for a run that ended with the error `what`:
/// "diverged" where a worker's loss or gradient was not finite
/// (train.on_nonfinite = "stop": "worker N: diverged at step S: ..."),
/// "failed" otherwise.
std::string failure_status(const std::string& what);

/// A language model's figures from the summary's samples: tokens,
/// tokens_per_sec (a sample is model.context tokens) and
/// final_test_perplexity (exp of the validation loss in nats per token).
/// Nothing for other models.
void add_token_figures(nlohmann::json& summary, const run_config& cfg);

} // namespace gradwire::scheduler
