#pragma once
/// @file gossip_wiring.hpp
/// The gossip wiring: D-PSGD and AD-PSGD on a graph.
/// Its rows of the topology registry are defined and registered in
/// gossip_wiring.cpp.

#include "scheduler/runtime/topology_registry.hpp"

namespace gradwire::scheduler {

extern const topology_family gossip_family;

/// Wires and runs a job of this family (its rows' `run`).
topology_outcome run_gossip_wiring(caf::actor_system& sys, const topology_setup& setup,
                                   const models::dataset& data, const progress_fn& on_progress,
                                   const metrics_fn& on_metrics, const std::atomic<bool>* stop);

} // namespace gradwire::scheduler
