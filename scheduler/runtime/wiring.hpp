#pragma once
/// @file wiring.hpp
/// The wirings behind run_topology (one file each) and what they share.

#include "scheduler/runtime/coordinator.hpp"
#include "scheduler/runtime/topology.hpp"

#include <optional>

namespace gradwire::scheduler {

using progress_fn = std::function<void(std::int64_t, std::int64_t)>;
using metrics_fn = std::function<void(const actors::step_metrics&)>;

/// A worker's configuration from the setup, for `rank`, reporting to `coordinator`.
actors::worker_config base_worker(const topology_setup& setup, const models::dataset& data, int rank,
                                  const caf::actor& coordinator);

topology_outcome run_ps_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                               const progress_fn& on_progress, const metrics_fn& on_metrics,
                               const std::atomic<bool>* stop);
topology_outcome run_ring_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                                 const progress_fn& on_progress, const metrics_fn& on_metrics,
                                 const std::atomic<bool>* stop);
topology_outcome run_gossip_wiring(caf::actor_system& sys, const topology_setup& setup,
                                   const models::dataset& data, const progress_fn& on_progress,
                                   const metrics_fn& on_metrics, const std::atomic<bool>* stop);

/// The steps a checkpoint may fall on are the multiples of this:
/// train.checkpoint_every, or by time 1, or where shards must keep a copy
/// of the version ahead (sync parameter server: 10; local SGD: the
/// multiple of local_steps from 10 up); 0: no checkpoints.
std::int64_t checkpoint_grid(const topology_setup& setup);

/// The coordinator's checkpoint plan from the setup: `shards` asked at
/// shard_version(step) (-1: as they are).
checkpoint_plan checkpoints_of(const topology_setup& setup, std::vector<caf::actor> shards = {},
                               std::function<std::int64_t(std::int64_t)> shard_version = {});

/// Across processes: throws unless every process runs one worker.
void check_one_worker_per_process(const topology_setup& setup);

/// Across processes (setup.node set), the part every wiring shares: this
/// process runs worker `rank` only. `spawn(report_to)` spawns it (and
/// whatever it owns); it is published in slots::worker; once every rank has
/// published, `wire(local, workers)` starts it, workers[r] being rank r's
/// worker (a proxy unless local). Rank 0 coordinates every worker and
/// returns the coordination; the others wait for their worker to finish
/// and return nothing.
std::optional<coordination> run_worker_across(
  caf::actor_system& sys, const topology_setup& setup, const std::function<caf::actor(const caf::actor&)>& spawn,
  const std::function<void(caf::scoped_actor&, const caf::actor&, const std::vector<caf::actor>&)>& wire,
  const progress_fn& on_progress, const metrics_fn& on_metrics, const std::atomic<bool>* stop, bool carry_on = false,
  const checkpoint_plan& checkpoints = {}, const elastic_plan& elastic = {});

/// Virtual time (setup.sim): runs the loop until every worker, by its
/// placed handle in `workers`, has reported to `self`, then stops it. A
/// stuck run reports each waiting worker's failure. The actors stay (a
/// parameter server's shards are fetched after); the caller shuts them down.
coordination coordinate_virtual(caf::scoped_actor& self, const topology_setup& setup,
                                const std::vector<caf::actor>& workers, const progress_fn& on_progress,
                                const metrics_fn& on_metrics, const std::atomic<bool>* stop);

/// The outcome of workers that return their replicas: params = their mean
/// (rank 0's when `first`), replica_spread, reports. Throws on a failure.
topology_outcome replicas_outcome(coordination c, bool first);

} // namespace gradwire::scheduler
