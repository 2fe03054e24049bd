#pragma once
/// @file config_halos.hpp
/// HALoS's keys ([topology.halos], internal to scheduler/app), checked
/// against the rest of the config.

#include "scheduler/app/config.hpp"
#include "scheduler/app/config_toml.hpp"

namespace gradwire::scheduler {

/// [topology.halos] into c.halos; with topology.kind = "halos", what it
/// cannot run with is refused naming the key (after the transport, faults
/// and virtual time are read).
void read_halos(config_toml::reader& r, run_config& c);

} // namespace gradwire::scheduler
