#pragma once
/// @file gossip_graph.hpp
/// Gossip's communication graphs: each rank's neighbours, symmetric and
/// without self loops. The wiring draws the fixed graph; with
/// topology.gossip.graph_seed every D-PSGD worker draws the same graph for each
/// step from (seed, step).

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::actors {

/// The graph `kind` (ring, torus, random, complete, exponential) on n
/// ranks; `degree` and `seed` shape the random one (a ring plus random
/// edges up to `degree` per rank). Throws gradwire::error on a bad kind
/// or size.
std::vector<std::vector<int>> gossip_graph(const std::string& kind, int n, int degree, std::uint64_t seed);

/// The random graph of step `step` under topology.gossip.graph_seed `seed`.
std::vector<std::vector<int>> graph_of_step(int n, int degree, std::uint64_t seed, std::int64_t step);

} // namespace gradwire::actors
