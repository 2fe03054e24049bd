#include "actors/gossip_graph.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace gradwire::actors {

std::vector<std::vector<int>> gossip_graph(const std::string& kind, int n, int degree, std::uint64_t seed) {
  check(n >= 1, "gossip needs at least one worker");
  std::vector<std::set<int>> adj(static_cast<std::size_t>(n));
  auto link = [&](int a, int b) {
    if (a != b) {
      adj[static_cast<std::size_t>(a)].insert(b);
      adj[static_cast<std::size_t>(b)].insert(a);
    }
  };
  if (kind == "ring") {
    for (int i = 0; i < n; ++i)
      link(i, (i + 1) % n);
  } else if (kind == "complete") {
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j)
        link(i, j);
  } else if (kind == "torus") {
    // The most square rows x cols grid with rows * cols = n, wrapped round.
    int rows = static_cast<int>(std::sqrt(static_cast<double>(n)));
    while (n % rows != 0)
      --rows;
    const int cols = n / rows;
    for (int i = 0; i < n; ++i) {
      const int r = i / cols, c = i % cols;
      link(i, r * cols + (c + 1) % cols);
      link(i, ((r + 1) % rows) * cols + c);
    }
  } else if (kind == "random") {
    // A ring (so the graph is connected) plus random edges up to `degree`.
    check(degree >= 2, "topology.gossip.degree must be at least 2 for a random graph");
    for (int i = 0; i < n; ++i)
      link(i, (i + 1) % n);
    std::mt19937_64 rng(seed * 2654435761ULL + 17);
    std::uniform_int_distribution<int> pick(0, n - 1);
    for (int i = 0; i < n; ++i)
      for (int tries = 0; static_cast<int>(adj[static_cast<std::size_t>(i)].size()) < std::min(degree, n - 1) && tries < 64 * n; ++tries)
        link(i, pick(rng));
  } else if (kind == "exponential") {
    // The one-peer exponential graph's every pair (Ying et al. 2021):
    // worker i meets i + 2^k and i - 2^k, one k a step (actors/gossip_worker.cpp).
    check(n >= 2 && (n & (n - 1)) == 0, "topology.gossip.graph = \"exponential\" needs a power of 2 of workers, got " +
                                          std::to_string(n));
    for (int i = 0; i < n; ++i)
      for (int hop = 1; hop < n; hop *= 2)
        link(i, (i + hop) % n);
  } else {
    throw error("topology.gossip.graph = \"" + kind + "\": expected ring, torus, random, complete or exponential");
  }
  std::vector<std::vector<int>> out;
  for (const auto& s : adj)
    out.emplace_back(s.begin(), s.end());
  return out;
}

std::vector<std::vector<int>> graph_of_step(int n, int degree, std::uint64_t seed, std::int64_t step) {
  return gossip_graph("random", n, degree, seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(step) * 1000003ULL);
}

} // namespace gradwire::actors
