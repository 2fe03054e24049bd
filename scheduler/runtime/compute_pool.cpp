#include "scheduler/runtime/compute_pool.hpp"

#include "kernels/cpu/denormals.hpp"

#include <chrono>

namespace gradwire::scheduler {

compute_pool::compute_pool(int helpers) {
  for (int i = 0; i < helpers; ++i)
    threads_.emplace_back([this] {
      kernels::flush_denormals_on_this_thread(); // as the loop's: the same bits on either
      serve();
    });
}

compute_pool::~compute_pool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  queued_.notify_all();
  for (auto& t : threads_)
    t.join();
}

std::shared_ptr<compute_pool::task> compute_pool::submit(std::function<void()> work) {
  auto t = std::make_shared<task>();
  t->work = std::move(work);
  if (threads_.empty())
    return t; // take() runs it
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(t);
  }
  queued_.notify_one();
  return t;
}

void compute_pool::run(task& t) {
  const auto t0 = std::chrono::steady_clock::now();
  t.work();
  t.work = nullptr; // what it captured goes now, on the thread that ran it
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void compute_pool::serve() {
  for (;;) {
    std::shared_ptr<task> t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      queued_.wait(lk, [this] { return quit_ || !queue_.empty(); });
      if (queue_.empty())
        return;
      // The latest first: the loop takes the earliest, which it needs
      // first, and the two meet only when the queue runs out.
      t = std::move(queue_.back());
      queue_.pop_back();
    }
    int queued = 0;
    if (!t->state.compare_exchange_strong(queued, 1))
      continue; // the loop took it first
    run(*t);
    {
      std::lock_guard<std::mutex> lk(mu_);
      t->state = 2;
    }
    done_.notify_all();
  }
}

std::shared_ptr<compute_pool::task> compute_pool::claim_next() {
  std::lock_guard<std::mutex> lk(mu_);
  while (!queue_.empty()) {
    auto t = std::move(queue_.front());
    queue_.pop_front();
    int queued = 0;
    if (t->state.compare_exchange_strong(queued, 1))
      return t;
  }
  return nullptr;
}

void compute_pool::take(const std::shared_ptr<task>& t, double& ran_here, double& waited) {
  for (;;) {
    int queued = 0;
    if (t->state.compare_exchange_strong(queued, 1)) {
      run(*t);
      t->state = 2;
      ran_here += t->seconds;
      return;
    }
    if (t->state.load() == 2)
      return;
    // A helper computes it: compute the next one meanwhile, else wait.
    if (const auto other = claim_next()) {
      run(*other);
      other->state = 2;
      ran_here += other->seconds;
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&t] { return t->state.load() == 2; });
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
}

} // namespace gradwire::scheduler
