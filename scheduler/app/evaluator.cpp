#include "scheduler/app/evaluator.hpp"

#include <fmt/format.h>

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace gradwire::scheduler {

evaluator::evaluator(const run_config& cfg, const models::dataset& test, results_writer& out, progress_line& progress,
                     std::int64_t steps_per_epoch, bool during_run)
    : during(during_run), model(cfg.model, kernels::device::cpu(), cfg.seed), cfg_(cfg), test_(test), out_(out),
      progress_(progress), steps_per_epoch_(steps_per_epoch), eval_batch_(eval_batch_of(cfg)),
      trainer_(model, cfg.opt, cfg.threads) {
  if (during) {
    bg_model_ = std::make_unique<models::model>(cfg.model, kernels::device::cpu(), cfg.seed);
    bg_trainer_ = std::make_unique<models::trainer>(*bg_model_, cfg.opt, 1);
    background_ = std::thread([this] { run_background(); });
  }
}

evaluator::~evaluator() { drain(); }

void evaluator::record(std::int64_t step, double secs, const models::eval_result& e) {
  std::lock_guard<std::mutex> lk(mu_);
  out_.metric({{"type", "eval"}, {"time", secs}, {"train_seconds", secs}, {"step", step},
               {"epoch", static_cast<double>(step) / static_cast<double>(steps_per_epoch_)},
               {"test_accuracy", e.accuracy}, {"test_loss", e.loss}});
  out_.flush();
  if (cfg_.target_accuracy > 0 && time_to_target.is_null() && e.accuracy >= cfg_.target_accuracy)
    time_to_target = secs;
  if (step >= latest_step_) {
    latest_step_ = step;
    latest_ = e;
  }
}

std::optional<models::eval_result> evaluator::latest() const {
  std::lock_guard<std::mutex> lk(mu_);
  return latest_step_ >= 0 ? std::optional<models::eval_result>(latest_) : std::nullopt;
}

void evaluator::set_state(models::model& m, const actors::slice& state) {
  if (state.defined() && state.numel() == m.state().numel())
    std::copy(state.data(), state.data() + state.numel(), m.state().data());
}

void evaluator::evaluate_and_record(models::model& m, models::trainer& t, const snapshot& s) {
  std::copy(s.params.data(), s.params.data() + m.size(), m.params().data());
  set_state(m, s.state);
  models::eval_result e;
  try {
    e = t.evaluate(test_, 0, eval_batch_, &abandoned_);
  } catch (const models::step_aborted&) {
    ++given_up_; // abandon(): no partial result is recorded
    return;
  }
  record(s.step, s.secs, e);
  if (steps_per_epoch_ > 0 && s.step % steps_per_epoch_ == 0) // a multi-worker run's epoch line
    progress_.note(fmt::format("epoch {}/{} (worker 0's replica at step {}, {:.1f} s): test loss {:.4f}, test acc {:.2f}%",
                               s.step / steps_per_epoch_, cfg_.epochs, s.step, s.secs, e.loss, 100 * e.accuracy));
}

void evaluator::submit(std::int64_t step, double secs, const actors::slice& params, const actors::slice& state) {
  if (static_cast<std::size_t>(params.numel()) != model.size())
    return; // not this model's parameters (cannot happen with our workers)
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back({step, secs, params, state});
  }
  cv_.notify_one();
}

std::optional<evaluator::snapshot> evaluator::take(bool wait) {
  std::unique_lock<std::mutex> lk(mu_);
  if (wait)
    cv_.wait(lk, [this] { return closing_ || !queue_.empty(); });
  if (queue_.empty())
    return std::nullopt;
  auto s = std::move(queue_.front());
  queue_.pop_front();
  return s;
}

void evaluator::run_background() {
  // Lowest priority: a worker never waits for this thread's cycles.
  sched_param none{};
  if (::sched_setscheduler(0, SCHED_IDLE, &none) != 0)
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
  while (auto s = take(true))
    evaluate_and_record(*bg_model_, *bg_trainer_, *s);
}

std::size_t evaluator::abandon() {
  abandoned_ = true;
  std::size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    dropped = queue_.size();
    queue_.clear();
    closing_ = true;
  }
  cv_.notify_all();
  if (background_.joinable())
    background_.join();
  return dropped + given_up_;
}

void evaluator::drain() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (background_.joinable())
    background_.join();
  while (auto s = take(false))
    evaluate_and_record(model, trainer_, *s);
}

} // namespace gradwire::scheduler
