/// @file ucx_progress.cpp
/// Who drives a ucx_link's worker. The progress thread polls while there
/// is traffic, spins `spin_us` after the last event (yielding the CPU
/// between polls with `spin_yield`), then sleeps on the worker's event
/// file descriptor, woken by the network or a local send. An application
/// thread that would otherwise wait (a ring worker waiting for its
/// neighbour) drives the worker itself through poll() when the lock is
/// free: frames it receives run their handlers on that thread. Where the
/// application polls, the progress thread runs at a high nice value
/// (progress_nice): it then only delivers what arrives while the
/// application computes, instead of preempting it at every frame.

#include "transport/ucx_link_impl.hpp"
#include "kernels/log.hpp"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace gradwire::transport {

namespace {

/// The calling thread's nice value and CPU, as the options ask (a failure
/// is reported and the thread runs as it is).
void place_progress_thread(const ucx_options& opts) {
  if (opts.progress_nice != 0 &&
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), opts.progress_nice) != 0)
    log::warn("could not set the progress thread's nice value to {}", opts.progress_nice);
  if (opts.pin_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(opts.pin_cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
      log::warn("could not pin the progress thread to CPU {}", opts.pin_cpu);
  }
}

} // namespace

std::int64_t ucx_link::impl::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

bool ucx_link::impl::poll_once() {
  std::unique_lock<std::mutex> lk(ucx_mu, std::try_to_lock);
  if (!lk.owns_lock() || stop.load(std::memory_order_relaxed))
    return false;
  driving = this;
  const bool drained = drain_queue();
  unsigned n = ucp_worker_progress(worker);
  if (!rndv.empty()) {
    fetch_rendezvous();
    ++n;
  }
  if (run_ready())
    ++n;
  drain_queue(); // (send() gave no signal for what this thread sent)
  driving = nullptr;
  last_poll_ns.store(now_ns(), std::memory_order_relaxed);
  return n > 0 || drained;
}

void ucx_link::impl::run() {
  driving = this; // this thread only ever drives this link
  place_progress_thread(opts);
  auto last = std::chrono::steady_clock::now();
  while (!stop.load(std::memory_order_relaxed)) {
    std::unique_lock<std::mutex> lk(ucx_mu);
    const bool drained = drain_queue();
    const unsigned n = ucp_worker_progress(worker) + (drained ? 1u : 0u);
    const bool handled = run_ready();
    if (!rndv.empty()) {
      fetch_rendezvous();
      run_ready();
      last = std::chrono::steady_clock::now();
      continue;
    }
    if (handled || n) {
      last = std::chrono::steady_clock::now();
      continue;
    }
    if (std::chrono::steady_clock::now() - last < std::chrono::microseconds(opts.spin_us)) {
      if (opts.spin_yield) {
        lk.unlock();
        sched_yield();
      }
      continue;
    }
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY || queued.load(std::memory_order_acquire) > 0)
      continue; // (a send queued before the arm would not wake the poll)
    lk.unlock();
    pollfd pfd{efd, POLLIN, 0};
    const int woken = ::poll(&pfd, 1, 1); // 1 ms: also bounds any missed wake-up
    // Woken by traffic: spin a while for what follows. Timed out: poll
    // once more and sleep again; spinning after every idle millisecond
    // held a third of a CPU away from the ranks at spin_us = 1000.
    last = std::chrono::steady_clock::now() - std::chrono::microseconds(woken > 0 ? opts.spin_us / 2 : opts.spin_us);
  }
}

} // namespace gradwire::transport
