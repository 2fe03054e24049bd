// Liveness: the heartbeat thread sends a beat to every live peer each
// `heartbeat_ms` and reports a peer down after `peer_timeout_ms` without a
// frame from it. See node.hpp.
#include "transport/node.hpp"
#include "kernels/log.hpp"

#include "actors/messages.hpp"
#include "kernels/stop_aware.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

namespace gradwire::transport {

namespace {
using heartbeat_atom = caf::atom_constant<caf::atom("gwbeat")>;
} // namespace

void node::watch(liveness live) {
  auto beat = caf::make_message(heartbeat_atom::value);
  auto seen_stop = kernels::last_stop_end();
  while (!stop_beat_.load()) {
    // This process did not run for a while (stopped, or starved of CPU:
    // kernels/stop_aware.hpp): the silence is its own, not the peers'.
    // They get a fresh timeout, so the frames queued meanwhile (a fence
    // among them) are read before anyone is judged gone.
    if (const auto stop = kernels::last_stop_end(); stop != seen_stop) {
      seen_stop = stop;
      log::warn("rank {}: this process did not run for {:.2f} s; its peers get a fresh {:.2f} s timeout before any "
        "is judged gone",
        rank(), std::chrono::duration<double>(kernels::last_stop_length()).count(), live.peer_timeout_ms / 1000.0);
      const auto tick = now_ms();
      for (int r = 0; r < size(); ++r)
        heard_[static_cast<std::size_t>(r)].store(tick);
    }
    for (int r = 0; r < size(); ++r) {
      if (r == rank())
        continue;
      {
        std::lock_guard<std::mutex> lk(down_mu_);
        if (down_[static_cast<std::size_t>(r)])
          continue;
      }
      const auto silent = now_ms() - heard_[static_cast<std::size_t>(r)].load();
      if (silent > live.peer_timeout_ms) {
        // Down for good: if it was only silent and comes back, it is not heard again.
        cut_[static_cast<std::size_t>(r)].store(true, std::memory_order_release);
        peer_down(r, "no frame for " + std::to_string(silent / 1000.0).substr(0, 4) +
                       " s (the process died, hangs, or its network is down)");
        continue;
      }
      try {
        forward(r, slots::heartbeat, nullptr, beat);
      } catch (const std::exception& e) {
        reject(e.what());
      }
    }
    for (int t = 0; t < live.heartbeat_ms && !stop_beat_.load(); t += 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

} // namespace gradwire::transport
