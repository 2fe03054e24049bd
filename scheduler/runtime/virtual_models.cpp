#include "scheduler/runtime/virtual_time.hpp"

#include <cmath>
#include <cstdio>

// Virtual time's cost models: a worker's step time and a message's link.

namespace gradwire::scheduler {

namespace {

/// Uniform in (0, 1) from the raw stream (the standard distributions'
/// algorithms are the library's own: these are the same bits on every build).
double uniform(std::mt19937_64& rng) { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

} // namespace

double draw_lognormal(std::mt19937_64& rng, double mean, double cv) {
  const double s2 = std::log1p(cv * cv), mu = std::log(mean) - s2 / 2;
  const double z = std::sqrt(-2 * std::log(uniform(rng))) * std::cos(6.283185307179586 * uniform(rng));
  return std::exp(mu + std::sqrt(s2) * z);
}

double compute_model::draw(std::mt19937_64& rng, std::int64_t step) const {
  if (!replay.empty())
    return replay[static_cast<std::size_t>(step) % replay.size()];
  switch (dist) {
  case shape::constant: return step_s;
  case shape::lognormal: return draw_lognormal(rng, step_s, cv);
  case shape::straggler: return uniform(rng) < straggler_p ? step_s * straggler_k : step_s;
  }
  return step_s;
}

std::string compute_model::describe() const {
  char b[160];
  if (!replay.empty())
    std::snprintf(b, sizeof b, "replay of %zu steps", replay.size());
  else if (dist == shape::lognormal)
    std::snprintf(b, sizeof b, "%.3f ms lognormal cv %.2f", step_s * 1e3, cv);
  else if (dist == shape::straggler)
    std::snprintf(b, sizeof b, "%.3f ms, %.0f%% of steps %.1fx slower", step_s * 1e3, straggler_p * 100, straggler_k);
  else
    std::snprintf(b, sizeof b, "%.3f ms constant", step_s * 1e3);
  return b;
}

std::string link_model::describe() const {
  char b[200];
  std::snprintf(b, sizeof b, "between hosts %.1f us, %s Gb/s%s; within a host %.1f us, %s Gb/s", latency_us,
                bandwidth_gbps > 0 ? std::to_string(bandwidth_gbps).substr(0, 6).c_str() : "unlimited",
                nic ? " (one NIC per host)" : "", intra_latency_us,
                intra_bandwidth_gbps > 0 ? std::to_string(intra_bandwidth_gbps).substr(0, 6).c_str() : "unlimited");
  std::string out = b;
  if (!host_gbps.empty()) {
    out += "; each host's NIC (Gb/s):";
    for (std::size_t h = 0; h < host_gbps.size(); ++h) {
      std::snprintf(b, sizeof b, "%s%g", h == 0 ? " " : ", ", host_gbps[h]);
      out += b;
    }
  }
  if (latency_cv > 0) {
    std::snprintf(b, sizeof b, "; latencies lognormal cv %.2f", latency_cv);
    out += b;
  }
  return out;
}

} // namespace gradwire::scheduler
