#include "scheduler/runtime/virtual_time.hpp"
#include "scheduler/runtime/virtual_placed.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

// Virtual time's cost models: a worker's step time and a message's link,
// the faults that act on them (link windows, a suspended host), and the
// checks on a setup of them.

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

void check_virtual_setup(const virtual_setup& setup) {
  check(!setup.compute.empty(), "virtual time: no compute model");
  for (const auto& c : setup.compute) {
    check(c.replay.empty() ? c.step_s > 0 && std::isfinite(c.step_s) : true, "virtual time: a step time must be > 0");
    for (double s : c.replay)
      check(s >= 0 && std::isfinite(s), "virtual time: a replayed step time must be >= 0");
  }
  check(setup.workers_per_host >= 1 && setup.hosts >= 1, "virtual time: hosts and workers_per_host must be >= 1");
  for (std::size_t r = 0; r < setup.host_of.size(); ++r)
    check(setup.host_of[r] >= 0 && setup.host_of[r] < setup.hosts,
          "virtual time: worker " + std::to_string(r) + " on host " + std::to_string(setup.host_of[r]) + " of " +
            std::to_string(setup.hosts));
  check(setup.cores_per_host >= 0, "virtual time: cores_per_host must be >= 0");
  check(setup.link.host_gbps.empty() || setup.link.host_gbps.size() == static_cast<std::size_t>(setup.hosts),
        "virtual time: " + std::to_string(setup.link.host_gbps.size()) + " NIC rates for " +
          std::to_string(setup.hosts) + " hosts");
  for (double g : setup.link.host_gbps)
    check(g > 0 && std::isfinite(g), "virtual time: a host's NIC rate must be > 0");
  check(setup.apply_gbps >= 0 && std::isfinite(setup.apply_gbps), "virtual time: apply_gbps must be >= 0");
  check(setup.copy_gbps >= 0 && std::isfinite(setup.copy_gbps), "virtual time: copy_gbps must be >= 0");
  check(setup.restart_s > 0 && setup.restart_s <= 1e6, "virtual time: restart_s must be in (0, 1e6]");
  check(setup.link.latency_cv >= 0 && std::isfinite(setup.link.latency_cv), "virtual time: latency_cv must be >= 0");
}

std::int64_t simulation::arrival(int from, int to, std::int64_t bytes, std::int64_t t) {
  const auto& l = setup_.link;
  auto wire = [bytes](double gbps) { return gbps > 0 ? ns_of(static_cast<double>(bytes) * 8 / (gbps * 1e9)) : 0; };
  if (from == to)
    return t + latency_ns(l.intra_latency_us) + wire(l.intra_bandwidth_gbps);
  const double gbps = l.host_gbps.empty() ? l.bandwidth_gbps
                                          : std::min(l.host_gbps[static_cast<std::size_t>(from)],
                                                     l.host_gbps[static_cast<std::size_t>(to)]);
  const auto lat = latency_ns(l.latency_us), on_wire = wire(gbps);
  if (!l.nic)
    return t + lat + on_wire;
  auto& tx = nic_tx_[static_cast<std::size_t>(from)];
  auto& rx = nic_rx_[static_cast<std::size_t>(to)];
  const auto sent = std::max(t, tx) + on_wire;
  tx = sent;
  const auto got = std::max(sent + lat, rx + on_wire);
  rx = got;
  return got;
}

void simulation::impair_links(int rank, const std::vector<int>& peers, double seconds, double delay_ms, bool down) {
  std::vector<int> to(peers);
  std::sort(to.begin(), to.end());
  windows_.push_back({rank, std::move(to), cur_now_, cur_now_ + ns_of(seconds), ns_of(delay_ms * 1e-3), down});
  ordered_ = true; // from here a message held or delayed must not be overtaken
}

std::int64_t simulation::impaired(int from, int to, std::int64_t sent, std::int64_t due) {
  windows_.erase(std::remove_if(windows_.begin(), windows_.end(),
                                [this](const link_window& w) { return w.end <= now_; }),
                 windows_.end());
  const auto transit = due - sent;
  for (const auto& w : windows_) {
    if (w.from != from || sent < w.begin || sent >= w.end || !std::binary_search(w.to.begin(), w.to.end(), to))
      continue;
    due = w.down ? std::max(due, w.end + transit) : due + w.delay;
  }
  return due;
}

std::int64_t simulation::latency_ns(double mean_us) {
  if (setup_.link.latency_cv <= 0 || mean_us <= 0)
    return ns_of(mean_us * 1e-6);
  return ns_of(draw_lognormal(link_rng_, mean_us * 1e-6, setup_.link.latency_cv));
}

void simulation::suspend_host(int rank, double seconds) {
  const auto d = ns_of(std::max(0.0, seconds)), from = cur_now_;
  const int host = host_of_worker(rank);
  for (auto& p : placed_) {
    if (p->host != host || p->down || p.get() == running_)
      continue;
    if (p->busy_until <= from) { // idle: it takes nothing before the end
      p->busy_until = from + d;
      continue;
    }
    p->busy_until += d; // busy: its work pauses meanwhile
    if (p->job && p->due_posted) { // a computation in flight: due that much later (the old due is stale)
      ++p->jobs;
      push(p->busy_until, p.get(), nullptr, p->jobs);
    }
  }
  if (setup_.cores_per_host > 0)
    for (auto& c : core_free_[static_cast<std::size_t>(host)])
      c = c > from ? c + d : from + d;
  charge(seconds); // the worker that struck stops too
}

} // namespace gradwire::scheduler
