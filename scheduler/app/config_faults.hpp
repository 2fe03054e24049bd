#pragma once
/// @file config_faults.hpp
/// The [[faults]] entries of a config: read and checked against the job
/// (each error names the file, line and entry), and written back into the
/// resolved config.toml.

#include "scheduler/app/config.hpp"

#include <toml++/toml.h>

#include <string>

namespace gradwire::scheduler {

/// Reads root's [[faults]] into c.faults; needs c.workers and c.topology.
void read_faults(const toml::table& root, const std::string& source, run_config& c);

/// c.faults as [[faults]] tables, every key with its value.
toml::array faults_toml(const run_config& c);

} // namespace gradwire::scheduler
