#pragma once
/// @file single_run.hpp
/// Runs an experiment with one worker in this process: the training loop,
/// periodic metrics, evaluation, progress, and the results folder. (The
/// multi-worker topologies wire actors around the same trainer.)

#include "actors/update_record.hpp"
#include "scheduler/app/config.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>

namespace gradwire::scheduler {

struct run_options {
  bool progress = true;
  /// Set (e.g. by SIGINT) to stop after the current step; the results
  /// folder is still written, with "status": "interrupted". The run sets
  /// it too when its results can no longer be written (a full disk).
  std::atomic<bool>* stop = nullptr;
  /// A sweep may replace an earlier sweep's folder (`--force`).
  bool force = false;
  /// Resume (`gradwire run --resume DIR`): continue the run in `resume`
  /// (a run folder or one of its checkpoints) from its newest complete
  /// checkpoint, or from step `resume_step` when above 0. The results go on
  /// in the same folder (metrics.jsonl is appended to).
  std::string resume;
  std::int64_t resume_step = 0;
  /// `gradwire replay` (replay.hpp): the shards follow these records and
  /// each worker runs its recorded steps; `replay_facts` goes into
  /// summary.json as "replay".
  std::shared_ptr<const actors::replay_cut> replay;
  nlohmann::json replay_facts;
};

/// Trains as `cfg` says and returns summary.json's content.
nlohmann::json run_single(run_config cfg, const run_options& opts = {});

} // namespace gradwire::scheduler
