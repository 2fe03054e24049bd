#pragma once
/// @file config_virtual.hpp
/// experiment.clock and the [virtual] section (internal to scheduler/app):
/// read, checked against the topology (each error names the key), into
/// run_config::virt.

#include "scheduler/app/config.hpp"
#include "scheduler/app/config_toml.hpp"

namespace gradwire::scheduler {

/// Needs c.workers, c.topology and c.nodes read.
void read_virtual(config_toml::reader& r, run_config& c);

} // namespace gradwire::scheduler
