#pragma once
/// @file system_config.hpp
/// The CAF scheduler settings every gradwire actor system uses.

#include <caf/actor_system_config.hpp>

namespace gradwire::actors {

/// `threads` scheduler threads, and a work-stealing policy for a machine
/// whose cores belong to the compute threads (see system_config.cpp).
void configure_scheduler(caf::actor_system_config& cfg, int threads);

} // namespace gradwire::actors
