#pragma once
/// @file reform_decision.hpp
/// An elastic ring's re-form decided from the survivors' replies to
/// abandon_atom, as the coordinator (coordinator_elastic.cpp) and virtual
/// time's reformer (virtual_reform.cpp) both take it.

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

struct reform_decision {
  std::int64_t step = 0;   ///< the furthest step done: every survivor goes on from it
  bool lost_round = false; ///< a survivor abandoned a round in flight
  /// (donor, behind): each survivor behind takes the state of a survivor
  /// at `step`: one on its own host if there is one, else the donors in
  /// turn, so that the transfers leave from many hosts rather than one.
  std::vector<std::pair<int, int>> transfers;
};

/// `replies`: rank -> (steps done, whether it abandoned a round);
/// `host_of`: each rank's host (empty: unknown, every donor alike).
inline reform_decision decide_reform(const std::map<int, std::pair<std::int64_t, bool>>& replies,
                                     const std::vector<int>& host_of = {}) {
  reform_decision d;
  for (const auto& [r, v] : replies) {
    d.step = std::max(d.step, v.first);
    d.lost_round = d.lost_round || v.second;
  }
  std::vector<int> donors;
  for (const auto& [r, v] : replies)
    if (v.first == d.step)
      donors.push_back(r);
  const auto host = [&host_of](int r) {
    return static_cast<std::size_t>(r) < host_of.size() ? host_of[static_cast<std::size_t>(r)] : -1;
  };
  std::map<int, std::size_t> turn; ///< by host: the next of its donors to give (-1: all donors)
  for (const auto& [r, v] : replies) {
    if (v.first == d.step)
      continue;
    std::vector<int> near;
    for (int g : donors)
      if (host(g) >= 0 && host(g) == host(r))
        near.push_back(g);
    const auto& from = near.empty() ? donors : near;
    d.transfers.emplace_back(from[turn[near.empty() ? -1 : host(r)]++ % from.size()], r);
  }
  return d;
}

} // namespace gradwire::scheduler
