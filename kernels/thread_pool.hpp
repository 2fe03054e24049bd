#pragma once
/// @file thread_pool.hpp
/// A fixed pool of threads that runs `fn(task)` for task = 0..n-1 and waits
/// for all of them: the fork-join behind a worker's threads (micro-batch
/// replicas, or GEMMs split by output block). Task 0 runs on the calling
/// thread, so a pool of size 1 starts no thread.
///
/// Waits spin briefly (50 us), then yield the core between checks (up to
/// 2 ms), then sleep: a step issues several fork-joins a millisecond with
/// serial stretches between them, and a condition-variable wake-up alone
/// costs more than most of those stretches (bench/RESULTS.md, "Measured
/// effects": the thread-pool hand-off).

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gradwire::kernels {

class thread_pool {
public:
  explicit thread_pool(std::size_t threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  std::size_t size() const { return workers_.size() + 1; }

  /// Runs fn(0..n-1) over the pool (n <= size()); rethrows the first exception.
  void run(std::size_t n, const std::function<void(std::size_t)>& fn);

private:
  void loop(std::size_t id);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t tasks_ = 0;
  std::atomic<std::size_t> generation_{0};
  std::atomic<std::size_t> pending_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

} // namespace gradwire::kernels
