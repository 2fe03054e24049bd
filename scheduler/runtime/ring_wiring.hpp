#pragma once
/// @file ring_wiring.hpp
/// The ring wiring: flat and hierarchical rings of allreduce.
/// Its rows of the topology registry are defined and registered in
/// ring_wiring.cpp.

#include "scheduler/runtime/topology_registry.hpp"

namespace gradwire::scheduler {

extern const topology_family ring_family;
extern const topology_family hierarchical_family;

/// Wires and runs a job of this family (its rows' `run`).
topology_outcome run_ring_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                                 const progress_fn& on_progress, const metrics_fn& on_metrics,
                                 const std::atomic<bool>* stop);

} // namespace gradwire::scheduler
