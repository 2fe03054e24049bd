#include "actors/batch_balance.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gradwire::actors {

int default_min_batch(std::int64_t total, int workers) {
  return static_cast<int>(std::max<std::int64_t>(1, total / (16 * std::max(1, workers))));
}

void speed_window::add_step(double seconds, std::int64_t samples) {
  steps_.emplace_back(std::max(0.0, seconds), std::max<std::int64_t>(0, samples));
}

speed_sample speed_window::take() {
  speed_sample out;
  out.fixed_seconds = fixed_;
  out.steps = steps();
  std::vector<double> rate; // seconds a sample, by step
  for (const auto& [seconds, samples] : steps_) {
    out.samples += samples;
    if (samples > 0)
      rate.push_back(seconds / static_cast<double>(samples));
  }
  if (!rate.empty()) {
    const auto mid = rate.begin() + static_cast<std::ptrdiff_t>((rate.size() - 1) / 2);
    std::nth_element(rate.begin(), mid, rate.end());
    out.compute_seconds = *mid * static_cast<double>(out.samples);
  }
  *this = {};
  return out;
}

namespace {

/// The split the measurements ask for, moved `gain` of the way from
/// `current`: the measured workers' part split so that each takes the same
/// time, b_i = (T - f_i) / a_i with sum b_i = their total (a_i: seconds a
/// sample, f_i: fixed seconds a step). Unmeasured workers keep theirs.
std::vector<double> balanced_targets(const std::vector<int>& current, const std::vector<speed_sample>& measured,
                                     double gain) {
  const std::size_t n = current.size();
  std::vector<double> a(n, 0), f(n, 0);
  double measured_total = 0, inv_a = 0, f_over_a = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& m = measured[i];
    if (m.samples <= 0 || m.steps <= 0 || !(m.compute_seconds > 0))
      continue;
    a[i] = m.compute_seconds / static_cast<double>(m.samples);
    f[i] = std::max(0.0, m.fixed_seconds / static_cast<double>(m.steps));
    measured_total += current[i];
    inv_a += 1 / a[i];
    f_over_a += f[i] / a[i];
  }
  std::vector<double> target(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = a[i] > 0 ? ((measured_total + f_over_a) / inv_a - f[i]) / a[i] : current[i];
    target[i] = current[i] + gain * (want - current[i]);
  }
  return target;
}

/// `target` clamped into [lo, hi] and rounded, with what clamping and
/// rounding moved spread so the sum is `total` exactly (largest remainders
/// first; ties to the lower rank).
std::vector<int> whole_split(const std::vector<double>& target, std::int64_t total, int lo, std::int64_t hi) {
  const std::size_t n = target.size();
  std::vector<int> out(n);
  std::vector<double> rest(n);
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double t = std::clamp(target[i], static_cast<double>(lo), static_cast<double>(hi));
    out[i] = static_cast<int>(std::floor(t));
    rest[i] = t - out[i];
    sum += out[i];
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return rest[x] > rest[y]; });
  for (bool moved = true; sum < total && moved;) { // give to the largest remainders (then to anyone below hi)
    moved = false;
    for (std::size_t k = 0; k < n && sum < total; ++k)
      if (out[order[k]] < hi) {
        ++out[order[k]];
        ++sum;
        moved = true;
      }
  }
  for (bool moved = true; sum > total && moved;) { // take from the smallest remainders (then from anyone above lo)
    moved = false;
    for (std::size_t k = n; k-- > 0 && sum > total;)
      if (out[order[k]] > lo) {
        --out[order[k]];
        --sum;
        moved = true;
      }
  }
  return out;
}

} // namespace

std::vector<int> rebalance(const std::vector<int>& current, const std::vector<speed_sample>& measured,
                           const balance_limits& limits) {
  const std::size_t n = current.size();
  check(measured.size() == n, "rebalance: " + std::to_string(measured.size()) + " measurements for " +
                                std::to_string(n) + " workers");
  const std::int64_t total = std::accumulate(current.begin(), current.end(), std::int64_t{0});
  const int lo = std::max(1, limits.min_batch);
  const std::int64_t hi = limits.max_batch > 0 ? limits.max_batch : total;
  check(static_cast<std::int64_t>(n) * lo <= total && static_cast<std::int64_t>(n) * hi >= total,
        "rebalance: a global batch of " + std::to_string(total) + " cannot be split " + std::to_string(n) +
          " ways within [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  if (n <= 1)
    return current;
  return whole_split(balanced_targets(current, measured, limits.gain), total, lo, hi);
}

} // namespace gradwire::actors
