#pragma once
/// @file ps_topology.hpp
/// Wires a parameter-server topology in one process: M shards over even
/// ranges of the parameter buffer, N workers each with its shard of the
/// data, and waits (bounded) for every worker to report.

#include "actors/messages.hpp"
#include "models/dataset.hpp"
#include "models/network.hpp"
#include "models/optimizer.hpp"
#include "models/trainer.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

namespace gradwire::scheduler {

struct ps_setup {
  models::model_spec spec;
  models::optimizer_spec opt;
  int workers = 2, shards = 1;
  bool sync = true;
  bool staleness_lr = false;
  int staleness_bound = -1; ///< async: SSP bound s (< 0: none)
  int local_steps = 0; ///< > 0: local SGD, parameters averaged every local_steps steps
  int batch_size = 64;
  /// Per worker (by rank), overriding batch_size and 1.0 when not empty.
  std::vector<int> worker_batch;
  std::vector<double> worker_slowdown;
  std::int64_t steps = 100; ///< per worker
  int threads = 1;          ///< per worker
  models::parallelism how = models::parallelism::automatic;
  std::uint64_t seed = 1;
  int log_every = 50; ///< steps per worker metrics record
  /// The longest a worker may stay silent (workers send a heartbeat about
  /// twice a second) before the run fails naming it; workers' requests
  /// time out after twice this.
  std::chrono::milliseconds timeout{60000};
};

struct ps_outcome {
  std::vector<float> params; ///< the shards' final parameters, whole buffer
  std::vector<actors::worker_report> reports; ///< by rank
  actors::histogram staleness;                ///< summed over shards
  std::int64_t max_clock_gap = 0;             ///< fastest - slowest worker, largest seen by any shard
  double seconds = 0;
  bool interrupted = false; ///< stopped early by the stop flag
};

/// Even ranges of a buffer of `n` floats for `parts` shards (16-aligned edges).
std::vector<std::pair<std::size_t, std::size_t>> shard_ranges(std::size_t n, int parts);

/// Runs the topology on `data`; throws gradwire::error naming the rank or
/// shard when a worker fails or does not report within the timeout.
/// `on_progress(steps, samples)` gets the totals over all workers as
/// heartbeats arrive; `on_metrics` each worker's record every log_every steps.
/// When `*stop` becomes true the workers are stopped and the shards'
/// parameters so far are returned with `interrupted` set.
ps_outcome run_parameter_server(
  caf::actor_system& sys, const ps_setup& setup, const models::dataset& data,
  const std::function<void(std::int64_t, std::int64_t)>& on_progress = {},
  const std::function<void(const actors::step_metrics&)>& on_metrics = {},
  const std::atomic<bool>* stop = nullptr);

} // namespace gradwire::scheduler
