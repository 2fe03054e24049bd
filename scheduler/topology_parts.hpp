#pragma once
/// @file topology_parts.hpp
/// The wirings behind run_topology (one file each) and what they share.

#include "scheduler/coordinator.hpp"
#include "scheduler/topology.hpp"

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

/// The outcome of workers that return their replicas: params = their mean
/// (rank 0's when `first`), replica_spread, reports. Throws on a failure.
topology_outcome replicas_outcome(coordination c, bool first);

} // namespace gradwire::scheduler
