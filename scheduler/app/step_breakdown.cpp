#include "scheduler/app/step_breakdown.hpp"

#include "scheduler/runtime/topology_registry.hpp"

#include <algorithm>

namespace gradwire::scheduler {

bool lockstep(const topology_setup& s) { return s.family->lock_step(s); }

step_breakdown breakdown_of(const std::vector<actors::worker_report>& reports) {
  if (reports.empty())
    return {};
  std::size_t steps = reports.front().step_compute_ms.size();
  double wall = 0, compute = 0;
  for (const auto& r : reports) {
    steps = std::min(steps, r.step_compute_ms.size());
    wall += r.seconds;
    compute += r.compute_seconds;
  }
  const auto n = static_cast<double>(reports.size());
  wall /= n;
  compute /= n;
  if (steps == 0 || wall <= 0)
    return {};
  double imbalance_ms = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    double slowest = 0, sum = 0;
    for (const auto& r : reports) {
      slowest = std::max<double>(slowest, r.step_compute_ms[s]);
      sum += r.step_compute_ms[s];
    }
    imbalance_ms += slowest - sum / n;
  }
  step_breakdown b;
  b.steps = static_cast<std::int64_t>(steps);
  b.compute = compute / wall;
  b.imbalance = imbalance_ms * 1e-3 / wall;
  b.exchange = 1.0 - b.compute - b.imbalance;
  return b;
}

} // namespace gradwire::scheduler
