#include "kernels/thread_pool.hpp"

#include "kernels/cpu/denormals.hpp"
#include "kernels/error.hpp"
#include "kernels/poll_wait.hpp"

namespace gradwire::kernels {

thread_pool::thread_pool(std::size_t threads) {
  for (std::size_t i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { loop(i); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
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
  if (n == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    tasks_ = n;
    error_ = nullptr;
    pending_.store(n - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  if (!poll_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_.load() == 0; });
  }
  std::lock_guard<std::mutex> lock(mu_);
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
    if (!poll_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return generation_.load() != seen; });
    }
    const std::function<void(std::size_t)>* job = nullptr;
    std::size_t tasks = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_)
        return;
      seen = generation_.load();
      job = job_;
      tasks = tasks_;
    }
    if (id >= tasks || job == nullptr)
      continue;
    std::exception_ptr err;
    try {
      (*job)(id);
    } catch (...) {
      err = std::current_exception();
    }
    if (err) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_)
        error_ = err;
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

} // namespace gradwire::kernels
