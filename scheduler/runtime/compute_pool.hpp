#pragma once
/// @file compute_pool.hpp
/// Virtual time's helper threads (virtual.threads): a worker's gradient,
/// handed over by the event loop, computes on one of them while the loop
/// goes on with other actors' events. The loop takes the result when the
/// worker's compute time is up; a task no helper has begun by then runs on
/// the loop's own thread, so the loop never waits for a queue.
///
/// A task touches only its worker's own state, which nothing else touches
/// until the loop has taken it: where it runs changes no bit.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gradwire::scheduler {

class compute_pool {
public:
  struct task {
    std::function<void()> work;
    std::atomic<int> state{0}; ///< 0 queued, 1 running, 2 done
    double seconds = 0;        ///< wall seconds it ran (set before done)
  };

  /// `helpers` threads besides the caller's (0: every task runs in take()).
  explicit compute_pool(int helpers);
  ~compute_pool(); ///< the helpers run what is queued, then stop
  compute_pool(const compute_pool&) = delete;
  compute_pool& operator=(const compute_pool&) = delete;

  std::shared_ptr<task> submit(std::function<void()> work);
  /// Returns once `t` has run: on this thread if no helper has begun it.
  /// While a helper runs it, this thread runs the next queued tasks. Adds
  /// the wall seconds tasks ran here to `ran_here` and those spent waiting
  /// for a helper to `waited`.
  void take(const std::shared_ptr<task>& t, double& ran_here, double& waited);
  int helpers() const { return static_cast<int>(threads_.size()); }

private:
  static void run(task& t);
  /// The first queued task no one has begun, now this thread's; or null.
  std::shared_ptr<task> claim_next();
  void serve();

  std::mutex mu_;
  std::condition_variable queued_, done_;
  std::deque<std::shared_ptr<task>> queue_;
  std::vector<std::thread> threads_;
  bool quit_ = false;
};

} // namespace gradwire::scheduler
