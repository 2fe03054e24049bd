#pragma once
/// @file shard_results.hpp
/// What the wirings with shards (the parameter server's, HALoS's) read of
/// them once the coordination is over, into a topology_outcome. In virtual time the loop has stopped: each request is
/// pumped through it on this thread.

#include "scheduler/runtime/wiring.hpp"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

using shard_ranges_t = std::vector<std::pair<std::size_t, std::size_t>>;

/// The parameters of `shards` (shard i over ranges[i]) into `params`, of
/// `size` floats; what went wrong, naming the shard ("<tier> i: ..."), or "".
std::string fetch_params(caf::actor_system& sys, caf::scoped_actor& self, const topology_setup& setup,
                         const std::vector<actors::shard_actor>& shards, const shard_ranges_t& ranges,
                         std::size_t size, std::vector<float>& params, const std::string& tier = "shard");

/// Each shard's staleness histogram, largest clock gap and dropped pushes
/// added to `out`'s; what went wrong, naming the shard, or "".
std::string add_shard_stats(caf::actor_system& sys, caf::scoped_actor& self, const topology_setup& setup,
                            const std::vector<actors::shard_actor>& shards, topology_outcome& out,
                            const std::string& tier = "shard");

} // namespace gradwire::scheduler
