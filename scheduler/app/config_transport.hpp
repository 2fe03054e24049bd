#pragma once
/// @file config_transport.hpp
/// The [transport] and [compression] keys (internal to scheduler/app): the
/// links' options and what a worker's exchange is compressed to, read and
/// checked into run_config (after the topology, which compression is
/// checked against).

#include "scheduler/app/config.hpp"
#include "scheduler/app/config_toml.hpp"

namespace gradwire::scheduler {

/// transport.tls, spin_us, ..., and compression.kind, ratio, rank, error_feedback, ...
void read_transport(config_toml::reader& r, run_config& c);

} // namespace gradwire::scheduler
