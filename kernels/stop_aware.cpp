#include "kernels/stop_aware.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>

#include <pthread.h>
#include <unistd.h>

namespace gradwire::kernels {
namespace {

using clock_type = std::chrono::steady_clock;

std::int64_t ns_of(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

constexpr std::int64_t gap_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(stop_gap).count();

std::atomic<std::int64_t> last_look{0}; ///< the latest look at the clock, by any thread
std::atomic<std::int64_t> stop_end{std::numeric_limits<std::int64_t>::min()};
std::atomic<std::int64_t> stop_length{0}; ///< of the stop that ended at stop_end (for messages)
std::atomic<pid_t> watcher_of{0}; ///< the process whose looking thread runs (a forked child has none)

/// A look at the clock at `t`: the first look after a gap longer than
/// stop_gap marks a stop that ended at `t`. The stop is recorded before
/// the look is published (release): whoever reads this look, or a later
/// one (acquire), sees the stop too. (Published first, a reader on another
/// thread could take the new look as its own, see no gap and no stop yet,
/// and judge a wait across the stop as if the process had run: it did,
/// under ASan, in the child test_stop_aware stops.)
void look(std::int64_t t) {
  auto prev = last_look.load(std::memory_order_acquire);
  for (;;) {
    if (prev >= t)
      return; // a later look came first: it saw any gap
    if (prev != 0 && t - prev > gap_ns) {
      stop_length.store(t - prev, std::memory_order_relaxed);
      auto end = stop_end.load(std::memory_order_relaxed);
      while (end < t && !stop_end.compare_exchange_weak(end, t, std::memory_order_relaxed)) {
      }
    }
    if (last_look.compare_exchange_weak(prev, t, std::memory_order_release, std::memory_order_acquire))
      return;
  }
}

/// This process's pid without a system call per ask (getpid() is one, and
/// every waited() and ran() asks, several times a ring worker's step);
/// a forked child forgets its parent's (pthread_atfork) and asks once.
std::atomic<pid_t> known_pid{0};

pid_t this_pid() {
  static const int forget_in_child = ::pthread_atfork(nullptr, nullptr, [] { known_pid.store(0); });
  (void)forget_in_child;
  pid_t p = known_pid.load(std::memory_order_relaxed);
  if (p == 0) {
    p = ::getpid();
    known_pid.store(p, std::memory_order_relaxed);
  }
  return p;
}

void ensure_watcher() {
  const pid_t me = this_pid();
  pid_t was = watcher_of.load(std::memory_order_acquire);
  if (was == me || !watcher_of.compare_exchange_strong(was, me, std::memory_order_acq_rel))
    return;
  // A forked child's first look: the parent's last look is no stop of ours.
  last_look.store(ns_of(clock_type::now()), std::memory_order_relaxed);
  std::thread([] {
    for (;;) {
      look(ns_of(clock_type::now()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }).detach();
}

} // namespace

void watch_stops() { ensure_watcher(); }

clock_type::time_point last_stop_end() {
  ensure_watcher();
  // Only the looking thread marks stops. Overdue, it is about to (this
  // process ran again a moment ago), or it cannot run (starved; or gone:
  // a child forked from a thread-holding parent under a sanitizer hung it
  // at its start). Wait for it a little: if it does not look, no stop is
  // assumed, and waits count the machine's time, as they did before.
  // (Readers that marked stops themselves took the missing looks of a hung
  // thread for stops, again and again: no wait would ever have ended.)
  for (int i = 0; i < 200 && ns_of(clock_type::now()) - last_look.load(std::memory_order_acquire) > gap_ns; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto end = stop_end.load(std::memory_order_relaxed);
  return end == std::numeric_limits<std::int64_t>::min() ? clock_type::time_point{}
                                                         : clock_type::time_point(std::chrono::nanoseconds(end));
}

clock_type::duration last_stop_length() { return std::chrono::nanoseconds(stop_length.load(std::memory_order_relaxed)); }

clock_type::duration ran(clock_type::time_point since) {
  const auto end = last_stop_end();
  const auto now = clock_type::now();
  const auto stopped = end > since ? end - std::max(since, end - last_stop_length()) : clock_type::duration::zero();
  return std::max(now - since - stopped, clock_type::duration::zero());
}

clock_type::duration waited(clock_type::time_point since) {
  const auto end = last_stop_end();
  return clock_type::now() - std::max(since, end);
}

} // namespace gradwire::kernels
