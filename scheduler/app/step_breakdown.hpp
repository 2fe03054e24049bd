#pragma once
/// @file step_breakdown.hpp
/// Where a lockstep topology's time goes (ring, hierarchical, synchronous
/// parameter server): every worker's step s ends together, so a step lasts
/// at least its slowest worker's compute. Of the workers' mean wall time W:
///
///   compute   = mean over workers of their compute time, / W
///   imbalance = sum over steps of (slowest compute - mean compute), / W:
///               time the average worker waits for a slower one to finish
///               computing (stragglers, uneven CPUs, jitter); no exchange
///               algorithm can win it back, only balancing the work can
///   exchange  = 1 - compute - imbalance: the runtime's own cost on the
///               critical path (moving and summing gradients, wake-ups,
///               scheduling), the step time left once the slowest worker
///               has computed
///
/// compute + imbalance + exchange = 1, and imbalance + exchange is the
/// usual overhead 1 - compute / wall. Built from worker_report's per-step
/// compute times (step_compute_ms).

#include "actors/messages.hpp"
#include "scheduler/runtime/topology.hpp"

#include <vector>

namespace gradwire::scheduler {

struct step_breakdown {
  double compute = 0, imbalance = 0, exchange = 0; ///< fractions of the mean wall time
  std::int64_t steps = 0;                          ///< steps every worker recorded; 0: no breakdown
};

/// Whether every worker's step s ends together (so a step lasts at least
/// its slowest worker's compute): the family's lock_step (ring,
/// hierarchical, and the synchronous parameter server without backup
/// workers).
bool lockstep(const topology_setup& s);

/// steps = 0 when no worker reported, a worker recorded no steps or no
/// time. Steps beyond the shortest record are left out of the imbalance.
step_breakdown breakdown_of(const std::vector<actors::worker_report>& reports);

} // namespace gradwire::scheduler
