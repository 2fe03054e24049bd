#pragma once
/// @file allreduce_driver.hpp
/// The allreduce benchmark's driver on one rank (`gradwire bench
/// allreduce`): it hands its ring peer one buffer per round (reduce_atom)
/// and counts the replies. Round 0 checks the sum of every element against
/// what the ranks' inputs add up to; the rounds after it run on zeros (sums
/// in place stay zeros): `warmup` untimed, then `iters` timed.

#include <caf/all.hpp>

#include <cstddef>
#include <functional>
#include <string>

namespace gradwire::actors {

struct allreduce_result {
  double seconds = 0;   ///< per timed round
  double max_error = 0; ///< of the check round
  std::string error;    ///< a peer's error, or a result that does not cover the buffer
};

struct allreduce_driver_config {
  caf::actor peer;      ///< this rank's ring peer, wired
  std::size_t floats = 0;
  int rank = 0, ranks = 1;
  int warmup = 0, iters = 1;
  /// Called once, from the driver's thread, when the last round is done or
  /// a peer reported an error.
  std::function<void(const allreduce_result&)> done;
};

/// Rank r's input element i: (r + 1) * (i % 13 + 1).
float allreduce_input(int rank, std::size_t i);
/// The sum of element i over `ranks` ranks.
float allreduce_expected(int ranks, std::size_t i);

caf::actor spawn_allreduce_driver(caf::actor_system& sys, allreduce_driver_config cfg);

} // namespace gradwire::actors
