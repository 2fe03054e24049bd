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
  /// at `step`, the donors taken in turn, so that the transfers leave
  /// from as many hosts as there are donors rather than from one.
  std::vector<std::pair<int, int>> transfers;
};

/// `replies`: rank -> (steps done, whether it abandoned a round).
inline reform_decision decide_reform(const std::map<int, std::pair<std::int64_t, bool>>& replies) {
  reform_decision d;
  for (const auto& [r, v] : replies) {
    d.step = std::max(d.step, v.first);
    d.lost_round = d.lost_round || v.second;
  }
  std::vector<int> donors;
  for (const auto& [r, v] : replies)
    if (v.first == d.step)
      donors.push_back(r);
  std::size_t next = 0;
  for (const auto& [r, v] : replies)
    if (v.first < d.step)
      d.transfers.emplace_back(donors[next++ % donors.size()], r);
  return d;
}

} // namespace gradwire::scheduler
