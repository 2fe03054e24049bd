#include "transport/peer_watch.hpp"

#include "kernels/log.hpp"
#include "kernels/stop_aware.hpp"

#include <chrono>

namespace gradwire::transport {

peer_watch::peer_watch(int ranks, int self)
    : ranks_(ranks), self_(self), heard_(std::make_unique<std::atomic<std::int64_t>[]>(static_cast<std::size_t>(ranks))) {
  const auto now = now_ms();
  for (int r = 0; r < ranks_; ++r)
    heard_[static_cast<std::size_t>(r)].store(now);
}

std::int64_t peer_watch::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

void peer_watch::heard(int rank) { heard_[static_cast<std::size_t>(rank)].store(now_ms()); }

void peer_watch::start(liveness live, hooks h) {
  const auto now = now_ms(); // the time to here (rendezvous, wiring) is no peer's silence
  for (int r = 0; r < ranks_; ++r)
    heard_[static_cast<std::size_t>(r)].store(now);
  thread_ = std::thread([this, live, h = std::move(h)] { run(live, h); });
}

void peer_watch::stop() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
}

void peer_watch::after_own_stop(const liveness& live) {
  // Stopped, or starved of CPU (kernels/stop_aware.hpp): the silence is this
  // process's own, not the peers'. They get a fresh timeout, so the frames
  // queued meanwhile (a fence among them) are read before anyone is judged gone.
  log::warn("rank {}: this process did not run for {:.2f} s; its peers get a fresh {:.2f} s timeout before any "
            "is judged gone",
            self_, std::chrono::duration<double>(kernels::last_stop_length()).count(), live.peer_timeout_ms / 1000.0);
  const auto tick = now_ms();
  for (int r = 0; r < ranks_; ++r)
    heard_[static_cast<std::size_t>(r)].store(tick);
}

void peer_watch::run(liveness live, const hooks& h) {
  auto seen_stop = kernels::last_stop_end();
  while (!stop_.load()) {
    if (const auto stop = kernels::last_stop_end(); stop != seen_stop) {
      seen_stop = stop;
      after_own_stop(live);
    }
    for (int r = 0; r < ranks_; ++r) {
      if (r == self_ || h.down(r))
        continue;
      const auto silent = now_ms() - heard_[static_cast<std::size_t>(r)].load();
      if (silent > live.peer_timeout_ms) {
        h.silent(r, "no frame for " + std::to_string(silent / 1000.0).substr(0, 4) +
                      " s (the process died, hangs, or its network is down)");
        continue;
      }
      h.beat(r);
    }
    for (int t = 0; t < live.heartbeat_ms && !stop_.load(); t += 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

} // namespace gradwire::transport
