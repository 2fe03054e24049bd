#pragma once
/// @file ps_wiring.hpp
/// The parameter-server wiring: the parameter server, local SGD and DiLoCo
/// (one wiring: M shards, N workers that pull and push).
/// Its rows of the topology registry (the wiring's entry, `run`, among
/// them) are defined and registered in ps_wiring.cpp.

#include "scheduler/runtime/topology_registry.hpp"

namespace gradwire::scheduler {

extern const topology_family parameter_server_family;
extern const topology_family local_sgd_family;
extern const topology_family diloco_family;

} // namespace gradwire::scheduler
