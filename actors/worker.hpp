#pragma once
/// @file worker.hpp
/// A worker: a model replica and its shard of the data. Each step it pulls
/// every parameter-server shard's slice, computes the gradient of one batch,
/// and pushes each shard its slice of the gradient. In local SGD it instead
/// steps its own replica and exchanges parameters every few steps. It runs detached (its
/// own thread), so computing never holds up the scheduler threads that
/// deliver other actors' messages. Every request has a timeout; a missing
/// reply ends the worker with an error naming the shard and the rank.

#include "actors/messages.hpp"
#include "models/dataset.hpp"
#include "models/network.hpp"
#include "models/trainer.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

namespace gradwire::actors {

struct worker_config {
  int rank = 0, world = 1;
  std::vector<caf::actor> shards;
  std::vector<std::pair<std::size_t, std::size_t>> ranges; ///< each shard's [begin, end)
  models::model_spec spec;
  int threads = 1;
  models::parallelism how = models::parallelism::automatic;
  int batch_size = 64;
  /// Emulated slower node: after computing a batch in t seconds the worker
  /// waits (slowdown - 1) * t more (1 = full speed).
  double slowdown = 1.0;
  std::int64_t steps = 0; ///< full batches to run (epochs wrap around)
  std::uint64_t seed = 1;
  bool sync = true;       ///< pull the version of the current step, not any
  /// Bounded staleness (async only): >= 0 makes the worker at step c wait
  /// until every worker has pushed c - bound steps; < 0: no bound.
  int staleness_bound = -1;
  /// Local SGD: > 0 means the worker updates its own replica with `opt`
  /// and, every `local_steps` steps (and after the last), pushes its
  /// parameters to be averaged and continues from the average.
  int local_steps = 0;
  models::optimizer_spec opt;
  const models::dataset* data = nullptr; ///< shared, read-only
  int log_every = 50;     ///< steps per (metrics_atom, step_metrics) record
  caf::actor report_to;   ///< receives (step_atom, rank, steps, samples) about twice a second and (done_atom, worker_report)
  std::chrono::milliseconds timeout{60000};
};

/// Spawns a detached worker that starts at once and reports when done.
caf::actor spawn_worker(caf::actor_system& sys, worker_config cfg);

} // namespace gradwire::actors
