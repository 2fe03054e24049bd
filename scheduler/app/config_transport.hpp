#pragma once
/// @file config_transport.hpp
/// The [transport] keys (internal to scheduler/app): the links' options
/// and the ring's gradient compression, read and checked into run_config
/// (after the topology, which compression is checked against).

#include "scheduler/app/config.hpp"
#include "scheduler/app/config_toml.hpp"

namespace gradwire::scheduler {

/// transport.tls, spin_us, ..., and compress, compress_ratio, compress_rank, compress_ef.
void read_transport(config_toml::reader& r, run_config& c);

} // namespace gradwire::scheduler
