#include "models/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace gradwire::models {

double lr_schedule::lr_factor(double t) const {
  t = std::max(0.0, t);
  const auto warm = static_cast<double>(warmup_steps);
  if (warmup_steps > 0 && t < warm)
    return (std::floor(t) + 1) / warm;
  const double after = t - warm; // steps since the warm-up ended
  if (kind == "step" && step_every > 0)
    return std::pow(static_cast<double>(step_factor), std::floor(after / static_cast<double>(step_every)));
  if (kind == "cosine" && total_steps > warmup_steps) {
    const double span = static_cast<double>(total_steps - warmup_steps);
    return 0.5 * (1 + std::cos(M_PI * std::min(1.0, after / span)));
  }
  return 1.0;
}

double lr_schedule::momentum_factor(double t) const {
  if (momentum_warmup_steps <= 0)
    return 1.0;
  return std::min(1.0, (std::floor(std::max(0.0, t)) + 1) / static_cast<double>(momentum_warmup_steps));
}

} // namespace gradwire::models
