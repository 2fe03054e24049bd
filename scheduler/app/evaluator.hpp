#pragma once
/// @file evaluator.hpp
/// Evaluation in a multi-worker run (on rank 0): snapshots of worker 0's
/// replica, taken every train.eval_every epochs or eval_steps steps, and the
/// final model. Snapshots are evaluated off the workers' critical path:
/// during the run on a thread of its own at the lowest priority
/// (SCHED_IDLE: it runs only on cycles no worker wants), or after the run
/// (train.eval = "after"). Either way each result is recorded at the time
/// its snapshot was taken, never on the coordinator's thread, so it is
/// never counted as exchange.

#include "actors/messages.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/trainer.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/progress.hpp"
#include "scheduler/app/results.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace gradwire::scheduler {

/// Test batches as large as a few training batches: large enough for the
/// kernels, small enough for the caches (a batch of 1000 made ResNet-20's
/// evaluation slower per image than its training).
inline int eval_batch_of(const run_config& cfg) { return std::clamp(4 * cfg.batch_size, 64, 1000); }

class evaluator {
public:
  /// `during_run`: a background thread evaluates snapshots as they come.
  evaluator(const run_config& cfg, const models::dataset& test, results_writer& out, progress_line& progress,
            std::int64_t steps_per_epoch, bool during_run);
  ~evaluator();
  evaluator(const evaluator&) = delete;
  evaluator& operator=(const evaluator&) = delete;

  /// Takes worker 0's snapshot (its own copy) at `step`, `secs` into the run.
  void submit(std::int64_t step, double secs, const actors::slice& params, const actors::slice& state);
  /// Every snapshot evaluated: what is left of them (during), or all (after,
  /// on all this run's threads). Their records precede the final one.
  void drain();
  /// A stop: the snapshots not yet evaluated are dropped, and one under
  /// evaluation is given up between two test batches (an evaluation can
  /// take longer than a stop may). Returns how many were dropped.
  std::size_t abandon();
  /// Records one evaluation (metrics.jsonl; time_to_target; latest).
  void record(std::int64_t step, double secs, const models::eval_result& e);
  /// The evaluation recorded at the highest step so far, if any.
  std::optional<models::eval_result> latest() const;
  /// BatchNorm statistics come with the parameters (as DDP takes rank 0's buffers).
  void set_state(const actors::slice& state) { set_state(model, state); }
  /// The final model's evaluation: `model`'s parameters as they are.
  models::eval_result evaluate_model() { return trainer_.evaluate(test_, 0, eval_batch_); }

  const std::chrono::steady_clock::time_point t_train = std::chrono::steady_clock::now();
  const bool during; ///< evaluate during the run (else after it)
  models::model model; ///< the final model (also the snapshots' with "after")
  nlohmann::json time_to_target = nullptr;

private:
  struct snapshot {
    std::int64_t step = 0;
    double secs = 0;
    actors::slice params, state;
  };
  static void set_state(models::model& m, const actors::slice& state);
  void evaluate_and_record(models::model& m, models::trainer& t, const snapshot& s);
  /// The next snapshot; with `wait`, blocks until one comes or drain().
  std::optional<snapshot> take(bool wait);
  void run_background();

  const run_config& cfg_;
  const models::dataset& test_;
  results_writer& out_;
  progress_line& progress_;
  std::int64_t steps_per_epoch_;
  int eval_batch_; ///< eval_batch_of(cfg)
  models::trainer trainer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> abandoned_{false}; ///< abandon(): an evaluation under way gives up
  std::atomic<std::size_t> given_up_{0}; ///< evaluations abandon() cut short
  std::int64_t latest_step_ = -1;
  models::eval_result latest_;
  std::deque<snapshot> queue_;
  bool closing_ = false;
  /// The background thread's own model and one-thread trainer.
  std::unique_ptr<models::model> bg_model_;
  std::unique_ptr<models::trainer> bg_trainer_;
  std::thread background_;
};

} // namespace gradwire::scheduler
