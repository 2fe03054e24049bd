#pragma once
/// @file halos_wiring.hpp
/// HALoS (Kim et al., ICML 2025): hierarchical asynchronous local SGD, a
/// local parameter server per group of workers and a global one
/// (actors/halos_rule.hpp). Its row of the topology registry is defined
/// and registered in halos_wiring.cpp.

#include "scheduler/runtime/topology_registry.hpp"

namespace gradwire::scheduler {

extern const topology_family halos_family;

} // namespace gradwire::scheduler
