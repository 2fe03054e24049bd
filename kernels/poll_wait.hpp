#pragma once
/// @file poll_wait.hpp
/// Waiting for something another thread is about to do, without sleeping:
/// busy ~50 us, then yielding the core between checks (other runnable
/// threads go first), giving up after ~2 ms so that the caller can sleep on
/// its condition variable. A futex wake-up costs tens of microseconds on
/// this VM, and the waits this is for (a pool's next fork-join, a ring
/// neighbour's chunk) are usually shorter. Used by the thread pool and the
/// ring workers.

#include <chrono>
#include <thread>

namespace gradwire::kernels {

/// A spin-wait hint to the core (x86 PAUSE): the loop yields execution
/// resources to a sibling hyperthread (another worker's compute) and
/// leaves the loop without a memory-order mis-speculation.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Returns whether pred() became true within the budget.
template <typename Pred>
bool poll_until(Pred pred) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto busy_until = start + std::chrono::microseconds(50);
  const auto yield_until = start + std::chrono::microseconds(2000);
  bool yielding = false;
  for (int i = 0;; ++i) {
    if (pred())
      return true;
    if (yielding)
      std::this_thread::yield();
    else
      cpu_relax();
    if (yielding || (i & 63) == 63) {
      const auto now = clock::now();
      if (now > yield_until)
        return pred();
      yielding = now > busy_until;
    }
  }
}

} // namespace gradwire::kernels
