#pragma once
/// @file ps_wiring.hpp
/// The parameter-server wiring: the parameter server, local SGD and DiLoCo
/// (one wiring: M shards, N workers that pull and push).
/// Its rows of the topology registry are defined and registered in
/// ps_wiring.cpp.

#include "scheduler/runtime/topology_registry.hpp"

namespace gradwire::scheduler {

extern const topology_family parameter_server_family;
extern const topology_family local_sgd_family;
extern const topology_family diloco_family;

/// Wires and runs a job of this family (its rows' `run`).
topology_outcome run_ps_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                               const progress_fn& on_progress, const metrics_fn& on_metrics,
                               const std::atomic<bool>* stop);

} // namespace gradwire::scheduler
