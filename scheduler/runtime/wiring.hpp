#pragma once
/// @file wiring.hpp
/// What the wirings behind run_topology (one file each, with its header)
/// share.

#include "scheduler/runtime/coordinator.hpp"
#include "scheduler/runtime/topology.hpp"

#include <optional>

namespace gradwire::scheduler {

using progress_fn = std::function<void(std::int64_t, std::int64_t)>;
using metrics_fn = std::function<void(const actors::step_metrics&)>;

/// A worker's configuration from the setup, for `rank`, reporting to
/// `coordinator`; `replacement`: a new process for a lost one (as
/// setup.replacing: it joins, and the kills aimed at its rank were the old one's).
actors::worker_config base_worker(const topology_setup& setup, const models::dataset& data, int rank,
                                  const caf::actor& coordinator, bool replacement = false);

/// Where shards keep a copy of the version a checkpoint will ask for (a
/// sync parameter server, local SGD), time-based checkpoints fall at most
/// once in this many versions, so the copy is rare next to the steps
/// (bench/RESULTS.md, checkpoint overhead).
inline constexpr std::int64_t checkpoint_versions_apart = 10;

/// The steps a checkpoint may fall on are the multiples of this:
/// train.checkpoint_every, or by time 1, or where shards must keep a copy
/// of the version ahead (the family's time_grid); 0: no checkpoints.
std::int64_t checkpoint_grid(const topology_setup& setup);

/// The coordinator's checkpoint plan from the setup: `shards` asked at
/// shard_version(step) (-1: as they are).
checkpoint_plan checkpoints_of(const topology_setup& setup, std::vector<actors::shard_actor> shards = {},
                               std::function<std::int64_t(std::int64_t)> shard_version = {});

/// Across processes: throws unless every process runs one worker.
void check_one_worker_per_process(const topology_setup& setup);

/// In one process: the handle the wiring hands out for `spawned`, which
/// belongs to worker `rank` (its worker, `worker`; or its ring peer). In
/// virtual time the actor placed on that worker's host; else itself.
caf::actor place_here(const topology_setup& setup, const caf::actor& spawned, int rank, bool worker);

/// In one process: coordinates `workers` (the handles place_here gave).
/// In virtual time this runs the loop until every worker has reported,
/// then stops it (a stuck run reports each waiting worker's failure; no
/// silence limit on the machine's clock, where a step of 1,024 simulated
/// workers takes seconds). The actors stay: end_here ends them.
coordination coordinate_here(caf::scoped_actor& self, const topology_setup& setup,
                             const std::vector<caf::actor>& workers, const progress_fn& on_progress,
                             const metrics_fn& on_metrics, const std::atomic<bool>* stop,
                             const checkpoint_plan& checkpoints = {}, const elastic_plan& elastic = {});

/// In one process: ends `actors` and waits for them (in virtual time every
/// placed actor, on this thread).
void end_here(caf::scoped_actor& self, const topology_setup& setup, const std::vector<caf::actor>& actors);

/// The coordination's end into `out`: interrupted, budget reached, lost
/// workers, faults and the workers' reports.
void take_coordination(topology_outcome& out, coordination c);

/// The outcome of workers that return their replicas: params = their mean
/// (rank 0's when `first`), replica_spread, reports. Throws on a failure.
topology_outcome replicas_outcome(coordination c, bool first);

} // namespace gradwire::scheduler
