#pragma once
/// @file lr_schedule.hpp
/// Learning-rate and momentum schedules: what optimizer applies at each of
/// its updates. Time is counted in steps per worker (t = 0 at the first
/// step), so one schedule means the same thing in every topology: an
/// optimizer that takes one update per step (a worker's own, a sync shard's)
/// has t = its update count; an async shard, one update per worker's push,
/// divides by `updates_per_step` (the workers).
///
/// - warm-up: lr rises linearly over `warmup_steps`, from lr / warmup_steps
///   at t = 0 to lr (Goyal et al. 2017, with the linear scaling rule);
/// - then "constant", "step" (times `step_factor` every `step_every`
///   steps after the warm-up) or "cosine" (to 0 at `total_steps`);
/// - momentum warm-up: momentum rises linearly from 0 over
///   `momentum_warmup_steps` (what asynchronous SGD needs where momentum
///   would amplify stale gradients early on).

#include <cstdint>
#include <string>

namespace gradwire::models {

struct lr_schedule {
  std::string kind = "constant"; ///< "constant" | "step" | "cosine"
  std::int64_t total_steps = 0;  ///< cosine: the run's steps per worker
  std::int64_t step_every = 0;   ///< step: steps between decays
  float step_factor = 0.1f;      ///< step: lr multiplied by this at each
  std::int64_t warmup_steps = 0;
  std::int64_t momentum_warmup_steps = 0;
  double updates_per_step = 1; ///< optimizer updates per step per worker (async shards: the workers)

  /// lr / base lr at step t (t >= 0, in steps per worker).
  double lr_factor(double t) const;
  /// momentum / base momentum at step t.
  double momentum_factor(double t) const;
  /// Whether it changes anything: a constant schedule without warm-ups.
  bool active() const { return kind != "constant" || warmup_steps > 0 || momentum_warmup_steps > 0; }
};

} // namespace gradwire::models
