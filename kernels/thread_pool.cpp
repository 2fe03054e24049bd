#include "kernels/thread_pool.hpp"

#include "kernels/cpu/denormals.hpp"
#include "kernels/error.hpp"

namespace gradwire::kernels {

thread_pool::thread_pool(std::size_t threads) {
  for (std::size_t i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { loop(i); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_)
    t.join();
}

void thread_pool::run(std::size_t n, const std::function<void(std::size_t)>& fn) {
  check(n <= size(), "thread_pool::run: " + std::to_string(n) + " tasks on " +
                       std::to_string(size()) + " threads");
  if (n == 0)
    return;
  flush_denormals_on_this_thread();
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    tasks_ = n;
    pending_ = n - 1;
    error_ = nullptr;
    ++generation_;
  }
  if (n > 1)
    start_cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (mine)
    std::rethrow_exception(mine);
  if (error_)
    std::rethrow_exception(error_);
}

void thread_pool::loop(std::size_t id) {
  flush_denormals_on_this_thread();
  std::size_t seen = 0;
  for (;;) {
    const std::function<void(std::size_t)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
      if (id >= tasks_)
        continue;
      job = job_;
    }
    std::exception_ptr err;
    try {
      (*job)(id);
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (err && !error_)
      error_ = err;
    if (--pending_ == 0)
      done_cv_.notify_one();
  }
}

} // namespace gradwire::kernels
