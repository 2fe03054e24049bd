#include "transport/link_faults.hpp"

#include "kernels/error.hpp"

#include <algorithm>

namespace gradwire::transport {

bool link_faults::window::covers(int peer) const {
  return std::find(peers.begin(), peers.end(), peer) != peers.end();
}

void link_faults::impair(const std::vector<int>& peers, double seconds, double delay_ms, bool down) {
  check(seconds >= 0 && delay_ms >= 0, "link fault: seconds and delay_ms must be >= 0");
  window w;
  w.peers = peers;
  w.from = clock_type::now();
  w.until = w.from + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  w.delay = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double, std::milli>(delay_ms));
  w.down = down;
  std::lock_guard<std::mutex> lk(mu_);
  windows_.push_back(std::move(w));
}

void link_faults::expire(clock_type::time_point now) {
  windows_.erase(std::remove_if(windows_.begin(), windows_.end(), [now](const window& w) { return w.until <= now; }),
                 windows_.end());
}

link_faults::clock_type::time_point link_faults::hold(int peer, clock_type::time_point now,
                                                      clock_type::time_point due) {
  std::lock_guard<std::mutex> lk(mu_);
  expire(now);
  for (const auto& w : windows_) {
    if (now < w.from || !w.covers(peer))
      continue;
    if (w.down)
      due = std::max(due, w.until);
    else
      due += w.delay;
  }
  return due;
}

bool link_faults::quiet(int peer, clock_type::time_point now) {
  std::lock_guard<std::mutex> lk(mu_);
  expire(now);
  return std::none_of(windows_.begin(), windows_.end(),
                      [&](const window& w) { return now >= w.from && w.covers(peer); });
}

} // namespace gradwire::transport
