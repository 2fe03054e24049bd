#pragma once
/// @file gossip_wiring.hpp
/// The gossip wiring: D-PSGD and AD-PSGD on a graph.
/// Its rows of the topology registry (the wiring's entry, `run`, among
/// them) are defined and registered in gossip_wiring.cpp.

#include "scheduler/runtime/topology_registry.hpp"

namespace gradwire::scheduler {

extern const topology_family gossip_family;

} // namespace gradwire::scheduler
