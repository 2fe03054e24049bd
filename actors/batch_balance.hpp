#pragma once
/// @file batch_balance.hpp
/// Speed-balanced synchronous steps: the global batch G = sum of the
/// workers' batches stays fixed, and its split between workers follows
/// their measured speed, so that a fast worker does not wait at every
/// allreduce for a slow one (LB-BSP, Chen et al. 2020; the "dynamic batch
/// sizing" of heterogeneous data-parallel training). Each worker's gradient
/// is weighted by its share (ring_worker_options::grad_weight = b_i N / G), so
/// the step is still the mean over the same G samples.
///
/// Every worker evaluates the same rule on the same numbers (each worker's
/// measurements reach all of them), so all agree on the split without a
/// coordinator; the rule is deterministic and uses no clock.

#include <cstdint>
#include <utility>
#include <vector>

namespace gradwire::actors {

/// One worker's measurements over a window of steps.
struct speed_sample {
  double compute_seconds = 0; ///< forward + backward (and any emulated slowdown): grows with the batch
  double fixed_seconds = 0;   ///< per-step work that does not (its share of the optimizer)
  std::int64_t samples = 0;   ///< in the window
  std::int64_t steps = 0;     ///< in the window
};

/// A worker's steps since the last round, each timed on its own. What goes
/// to the others (take()) is charged at the lower median step's time a
/// sample: a spike in fewer than half of the window's steps (a preemption
/// on a busy machine, a page-fault storm) does not move the split: a mean
/// would let one held-up step make a fast worker look slower than a slow
/// one and halve its batch. A slowness that lasts (a slower node, an
/// emulated slowdown, a slow spell) is in most steps and counts in full.
class speed_window {
 public:
  /// One step's forward + backward: `seconds` for `samples`.
  void add_step(double seconds, std::int64_t samples);
  /// Per-step work that does not grow with the batch.
  void add_fixed(double seconds) { fixed_ += seconds; }
  std::int64_t steps() const { return static_cast<std::int64_t>(steps_.size()); }
  /// The window as measured (see above), and a fresh one begun.
  speed_sample take();

 private:
  std::vector<std::pair<double, std::int64_t>> steps_; ///< (seconds, samples) by step
  double fixed_ = 0;
};

struct balance_limits {
  int min_batch = 1; ///< no worker's batch below this
  int max_batch = 0; ///< nor above this (0: no limit but the total)
  /// The step moves each batch this fraction of the way to the balanced
  /// split (damps the noise of one window's measurements).
  double gain = 0.5;
};

/// The smallest batch balancing gives a worker by default: 1/16 of the mean
/// (a worker that slow adds little; one still smaller would mostly add
/// per-step overhead).
int default_min_batch(std::int64_t total, int workers);

/// The next split: `current` batches (their sum is the global batch) and
/// each worker's `measured` speed at them. Models each worker's step as
/// fixed_i + a_i b (a_i = compute_seconds / samples, fixed_i per step) and
/// moves towards the split where every step takes as long. The result
/// sums to the same total and stays within `limits`; a worker without
/// measurements (no samples) keeps its batch's share of the rest.
std::vector<int> rebalance(const std::vector<int>& current, const std::vector<speed_sample>& measured,
                           const balance_limits& limits);

} // namespace gradwire::actors
