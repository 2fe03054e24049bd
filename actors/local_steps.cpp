/// @file local_steps.cpp
/// Dynamic local steps: the pace table, the replay's answer from the
/// record, and shard 0's (pace_atom) handler.

#include "actors/local_steps.hpp"

#include "actors/ps_shard_state.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace gradwire::actors {

bool pace_table::note(int rank, double seconds_per_step) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= seconds_.size() || !std::isfinite(seconds_per_step) ||
      seconds_per_step < 0)
    return false;
  seconds_[static_cast<std::size_t>(rank)] = seconds_per_step;
  return true;
}

std::int64_t pace_table::next_round(int rank, std::int64_t local_steps, const std::vector<bool>& live) const {
  const double own = rank >= 0 && static_cast<std::size_t>(rank) < seconds_.size() ? seconds_[static_cast<std::size_t>(rank)] : 0;
  double fastest = 0;
  for (std::size_t r = 0; r < seconds_.size(); ++r)
    if (seconds_[r] > 0 && (r >= live.size() || live[r]) && (fastest == 0 || seconds_[r] < fastest))
      fastest = seconds_[r];
  if (own <= 0 || fastest <= 0)
    return local_steps;
  const auto steps = static_cast<std::int64_t>(std::llround(static_cast<double>(local_steps) * fastest / own));
  return std::clamp<std::int64_t>(steps, 1, local_steps);
}

std::int64_t recorded_round(const shard_record& record, const std::vector<std::size_t>& entries_of_rank,
                            std::int64_t step, std::int64_t fallback) {
  bool past = false;
  for (const auto i : entries_of_rank) {
    const auto& e = record.entries[i];
    if (e.serve)
      continue;
    if (past)
      return e.step - step;
    past = e.step == step;
  }
  return fallback;
}

namespace shard_detail {

caf::result<std::int64_t> on_pace(shard_state& st, int rank, std::int64_t step, double seconds_per_step) {
  const auto who = "shard " + std::to_string(st.cfg.id) + ": pace from rank " + std::to_string(rank);
  if (!st.cfg.ps.dynamic())
    return caf::make_error(caf::sec::invalid_argument, who + ": dynamic local steps are off");
  if (step < 0 || !st.paces.note(rank, seconds_per_step))
    return caf::make_error(caf::sec::invalid_argument,
                           who + " refused (step " + std::to_string(step) + ", " + std::to_string(seconds_per_step) +
                             " s a step; ranks 0 to " + std::to_string(st.clocks.size() - 1) + ")");
  const std::int64_t h = st.cfg.ps.local_steps;
  if (st.gate) // a replay: the rounds the run took
    return recorded_round(*st.gate->record, st.gate->mine[static_cast<std::size_t>(rank)], step, h);
  return st.paces.next_round(rank, h, st.live);
}

} // namespace shard_detail
} // namespace gradwire::actors
