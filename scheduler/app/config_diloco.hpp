#pragma once
/// @file config_diloco.hpp
/// DiLoCo's own keys beyond the parameter server's (internal to
/// scheduler/app): async DiLoCo's delayed Nesterov and dynamic local steps,
/// and streaming DiLoCo's fragments, each checked against the topology.

#include "scheduler/app/config.hpp"
#include "scheduler/app/config_toml.hpp"

namespace gradwire::scheduler {

/// Async DiLoCo: [topology.diloco] outer_delay and dynamic_local_steps (after the mode and local steps).
void read_async_outer(config_toml::reader& r, run_config& c);
/// Streaming DiLoCo: fragments, sync_delay, merge_alpha (after
/// topology.local_steps and the mode).
void read_streaming(config_toml::reader& r, run_config& c);
/// Streaming: a fragment holds whole tensors, so at most one per tensor
/// (once c.model is whole: a torch module's tensors are known then).
void check_fragments(config_toml::reader& r, const run_config& c);

} // namespace gradwire::scheduler
