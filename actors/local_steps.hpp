#pragma once
/// @file local_steps.hpp
/// Async DiLoCo's dynamic local steps (DyLU, Liu et al. 2024,
/// topology.diloco.dynamic_local_steps). A worker of speed v takes
/// H x v / v_fastest inner steps a round, so a worker three times slower
/// pushes after a third of the steps, at about the same wall time as the
/// fastest. Speeds are measured: each worker reports its compute seconds
/// per inner step over the round it just ended ((pace_atom), to shard 0),
/// and shard 0 answers the length of its next round from the latest pace
/// of every live worker. The answer is rounded to the nearest step, so
/// workers of one speed keep H through timing noise.
///
/// A replay follows the run's rounds: shard 0 answers from its record,
/// where each worker's pushes mark where its rounds ended.

#include "actors/update_record.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradwire::actors {

/// The seconds per inner step each worker last reported.
class pace_table {
public:
  explicit pace_table(int workers = 0) : seconds_(static_cast<std::size_t>(workers), 0.0) {}
  /// Keeps `rank`'s pace; false (nothing kept) for a rank outside the
  /// workers or a pace that is negative or not finite.
  bool note(int rank, double seconds_per_step);
  /// Steps in `rank`'s next round: round(H x fastest / own), from 1 to H,
  /// where fastest is the smallest pace among `live` workers; H while its
  /// own pace, or every pace, is unknown (0).
  std::int64_t next_round(int rank, std::int64_t local_steps, const std::vector<bool>& live) const;

private:
  std::vector<double> seconds_;
};

/// A replay's answer: the steps of the round that follows `rank`'s push of
/// `step`, as the record holds them (the step of its next push minus
/// `step`); `fallback` where the record holds no later push of that rank
/// (its last round, or a record cut short).
std::int64_t recorded_round(const shard_record& record, const std::vector<std::size_t>& entries_of_rank,
                            std::int64_t step, std::int64_t fallback);

} // namespace gradwire::actors
