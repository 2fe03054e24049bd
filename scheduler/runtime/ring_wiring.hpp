#pragma once
/// @file ring_wiring.hpp
/// The ring wiring: flat and hierarchical rings of allreduce.
/// Its rows of the topology registry (the wiring's entry, `run`, among
/// them) are defined and registered in ring_wiring.cpp.

#include "scheduler/runtime/topology_registry.hpp"

namespace gradwire::scheduler {

extern const topology_family ring_family;
extern const topology_family hierarchical_family;

} // namespace gradwire::scheduler
