#include "scheduler/app/single_run.hpp"
#include "scheduler/app/run_summary.hpp"
#include "kernels/log.hpp"

#include "scheduler/app/checkpoint.hpp"
#include "scheduler/app/model_file.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "models/batcher.hpp"
#include "models/recent_mean.hpp"
#include "models/trainer.hpp"
#include "scheduler/app/data_source.hpp"
#include "scheduler/app/progress.hpp"
#include "scheduler/app/run_id.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/trace_file.hpp"
#include "scheduler/app/wiring_setup.hpp"

#include <fmt/format.h>

#include <chrono>

namespace gradwire::scheduler {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// One worker's training loop in this process, its records and summary.
class single_run {
public:
  /// cfg's optimizer with its schedule, for `train_size` samples.
  static models::optimizer_spec scheduled_optimizer(const run_config& c, std::int64_t train_size) {
    // As the batcher counts them: the last batch of an epoch may be partial.
    const std::int64_t per_epoch = std::max<std::int64_t>(1, (train_size + c.batch_size - 1) / c.batch_size);
    std::int64_t total = per_epoch * c.epochs;
    if (c.max_steps > 0)
      total = std::min(total, c.max_steps);
    return optimizer_for(c, per_epoch, total, c.batch_size);
  }

  single_run(run_config cfg, const run_options& opts)
      : cfg_(std::move(cfg)), opts_(opts), progress_(opts.progress), data_(load_data(cfg_)),
        dev_(kernels::parse_device(cfg_.device)), model_(cfg_.model, dev_, cfg_.seed),
        trainer_(model_, scheduled_optimizer(cfg_, data_.train.size()), cfg_.threads,
                 models::parse_parallelism(cfg_.parallelism)),
        batches_(data_.train, models::shard_indices(data_.train.size(), 0, 1, cfg_.seed), cfg_.batch_size, cfg_.seed),
        out_(cfg_.out, !opts.resume.empty()),
        tracer_(cfg_.trace ? std::make_shared<actors::tracer>(static_cast<std::size_t>(cfg_.trace_spans)) : nullptr),
        tr_(actors::trace_ref::open(tracer_, "worker 0")), // data, compute (forward, backward, update), evaluate
        trace_out_(tracer_, cfg_.out, cfg_.name, 1) {
    out_.run_id(cfg_.run_id);
    if (opts_.resume.empty())
      out_.write_file("config.toml", cfg_.resolved_toml);
    out_.stop_on_failure(opts_.stop);
    steps_per_epoch_ = batches_.batches_per_epoch();
    last_epoch_loss_ = models::recent_mean(static_cast<std::size_t>(std::max<std::int64_t>(1, steps_per_epoch_)));
    total_steps_ = steps_per_epoch_ * cfg_.epochs;
    if (cfg_.max_steps > 0)
      total_steps_ = std::min(total_steps_, cfg_.max_steps);
    const auto identity = checkpoint_identity(cfg_, static_cast<std::int64_t>(model_.size()));
    if (!opts_.resume.empty())
      resume(identity);
    if (cfg_.tensorboard)
      out_.tensorboard(time_base_);
    if (cfg_.checkpoint_every > 0 || cfg_.checkpoint_every_s > 0 || opts_.stop != nullptr)
      checkpoints_ = std::make_unique<checkpoint_writer>(cfg_.out, cfg_.keep_checkpoints, identity);
    abortable_ = opts_.stop != nullptr; // Ctrl-C and SIGTERM end even a step of minutes within a layer's time
    if (abortable_) {
      trainer_.abort_on(opts_.stop);
      if (model_.state().numel() > 0)
        state_before_ = kernels::tensor::empty(model_.state().shape(), model_.dev());
    }
  }

  nlohmann::json run() {
    progress_.note(fmt::format("gradwire: {} | {} ({} parameters) on {} x {} thread(s) | {} train / {} "
                               "test samples | results in {}",
                               cfg_.name, cfg_.model.kind, model_.parameter_count(), cfg_.device, trainer_.threads(),
                               data_.train.size(), data_.test.size(), cfg_.out));
    for (int epoch = batches_.epoch() + 1; epoch <= cfg_.epochs && step_ < total_steps_ && !stopped(); ++epoch) {
      run_epoch(epoch);
      if (stopped() || !diverged_.empty())
        break;
      const bool last = epoch == cfg_.epochs || step_ >= total_steps_;
      if (epoch % cfg_.eval_every == 0 || last) {
        evaluate(epoch);
        progress_.note(fmt::format("epoch {}/{}: train loss {:.4f}, train acc {:.2f}%, test loss {:.4f}, "
                                   "test acc {:.2f}%, {:.0f} samples/s",
                                   epoch, cfg_.epochs, epoch_loss_, 100 * epoch_acc_, last_eval_.loss,
                                   100 * last_eval_.accuracy,
                                   train_seconds_ > 0 ? static_cast<double>(samples_) / train_seconds_ : 0));
      }
    }
    progress_.finish();
    if (!diverged_.empty())
      end_diverged();
    if (checkpoints_ && opts_.stop != nullptr && opts_.stop->load() && !out_.failed() && step_ < total_steps_)
      save_checkpoint(); // interrupted: resumable from here
    out_.flush();
    auto summary = summary_json();
    add_token_figures(summary, cfg_);
    if (checkpoints_) {
      checkpoints_->drain();
      summary["checkpoints"] = {{"every", cfg_.checkpoint_every}, {"every_seconds", cfg_.checkpoint_every_s},
                                {"written", checkpoints_->written()},
                                {"persist_seconds", checkpoints_->seconds()}, {"error", checkpoints_->error()}};
      if (!checkpoints_->error().empty())
        log::warn("a checkpoint was not written: {}", checkpoints_->error());
    }
    summary["resumed_from"] = resumed_from_ >= 0 ? nlohmann::json(resumed_from_) : nlohmann::json(nullptr);
    if (out_.failed()) { // a full disk: say so, where it still can be said
      const auto lost = out_.failure();
      summary["status"] = "failed";
      summary["error"] = lost;
      try {
        out_.write_summary(summary);
      } catch (const error& e) {
        throw error(lost + "; and " + e.what());
      }
      throw error(lost);
    }
    const auto params = model_.params().to_vector(), state = model_.state().to_vector();
    out_.write_file("model.safetensors",
                    safetensors_of(model_, params.data(), state.data(),
                                   run_metadata(cfg_.resolved_toml, model_.spec(), data_.input_mean, data_.input_std)));
    out_.write_summary(summary);
    return summary;
  }

private:
  /// The trainer's state as a checkpoint part (the same fields as a worker's).
  actors::snapshot take_snapshot() const {
    actors::snapshot s;
    s.who = "worker 0";
    s.step = step_;
    s.put("params", model_.params().to_vector());
    if (model_.state().numel() > 0)
      s.put("state", model_.state().to_vector());
    auto saved = trainer_.optim().save();
    s.put("moments", std::move(saved.moments));
    s.put("optimizer_steps", saved.steps);
    s.put("samples", samples_);
    s.put("epoch", static_cast<std::int64_t>(batches_.epoch()));
    s.put("position", batches_.position());
    s.put("batch_size", static_cast<std::int64_t>(cfg_.batch_size));
    return s;
  }

  void save_checkpoint() {
    std::vector<actors::snapshot_frame> parts;
    parts.push_back(actors::snapshot_frame::of(take_snapshot()));
    checkpoints_->submit(step_, std::move(parts), {{"train_seconds", train_seconds_}, {"eval_seconds", eval_seconds_}});
  }

  /// Continues from opts_.resume's checkpoint: the model, optimizer, data
  /// position and counts as they were.
  void resume(const nlohmann::json& identity) {
    const auto c = load_checkpoint(opts_.resume, opts_.resume_step);
    check_identity(c, identity);
    const auto& s = *c.point->part("worker 0");
    auto fit = [&](const std::string& name, const kernels::tensor& t) {
      const auto& v = s.f(name);
      check(v.size() == static_cast<std::size_t>(t.numel()), c.dir + ": '" + name + "' holds " + std::to_string(v.size()) +
                                                                 " floats, this model " + std::to_string(t.numel()));
      kernels::copy(kernels::tensor::from(v, {t.numel()}), t);
    };
    fit("params", model_.params());
    if (model_.state().numel() > 0)
      fit("state", model_.state());
    trainer_.optim().load({s.one("optimizer_steps"), s.f("moments")});
    check(s.one("batch_size") == cfg_.batch_size, c.dir + ": saved at batch size " + std::to_string(s.one("batch_size")) +
                                                    ", this run has " + std::to_string(cfg_.batch_size));
    const auto epoch = s.one("epoch");
    check(epoch >= 0 && epoch < cfg_.epochs, c.dir + ": saved in epoch " + std::to_string(epoch + 1) + " of a run of " +
                                               std::to_string(cfg_.epochs));
    batches_.seek(static_cast<int>(epoch), s.one("position"));
    step_ = s.step;
    samples_ = s.one("samples");
    const auto& run = c.manifest["run"];
    if (run.contains("train_seconds") && run["train_seconds"].is_number())
      train_seconds_ = run["train_seconds"].get<double>();
    if (run.contains("eval_seconds") && run["eval_seconds"].is_number())
      eval_seconds_ = run["eval_seconds"].get<double>();
    resumed_from_ = step_;
    time_base_ = train_seconds_ + eval_seconds_;
    const auto superseded = out_.cut_after(step_);
    out_.metric({{"type", "resume"}, {"time", train_seconds_}, {"step", step_}, {"checkpoint", c.dir}, {"superseded", superseded}});
    progress_.note(fmt::format("resuming from the checkpoint of step {} ({})", step_, c.dir));
  }

  bool stopped() const { return (opts_.stop != nullptr && opts_.stop->load()) || out_.failed(); }

  /// One training step; false when a stop request came in its middle (the
  /// network looks between layers): the step is abandoned, the parameters
  /// and optimizer as before it, and the state (BatchNorm's statistics,
  /// which a training forward updates) and the batch put back, so that the
  /// run ends, and its checkpoint holds, the step before as if it had
  /// stopped there (a resume takes that batch next, bit for bit).
  bool step_or_stop(const models::batch& b, models::step_result& r) {
    const bool keep_state = abortable_ && model_.state().numel() > 0;
    if (keep_state)
      kernels::copy(model_.state(), state_before_);
    try {
      r = trainer_.step(b.x.data(), b.y.data(), b.size);
      if (r.skipped && ++skipped_ <= 10)
        log::warn("worker 0: step {}: a NaN or infinite loss or gradient, skipped (train.on_nonfinite = \"skip\")", step_ + 1);
      return true;
    } catch (const models::nonfinite& e) {
      diverged_ = fmt::format("worker 0: diverged at step {}: {}", step_ + 1, e.what());
      return false;
    } catch (const models::step_aborted&) {
      if (keep_state)
        kernels::copy(state_before_, model_.state());
      batches_.put_back(b.size);
      log::info("stopped in the middle of step {}: the run ends after step {}", step_ + 1, step_);
      return false;
    }
  }

  /// train.on_nonfinite = "stop": summary.json says where the run
  /// diverged; the run ends as an error (metrics and checkpoints so far kept).
  [[noreturn]] void end_diverged() {
    out_.flush();
    auto summary = summary_json();
    summary["status"] = "diverged";
    summary["error"] = diverged_;
    summary["diverged"] = {{"worker", 0}, {"step", step_ + 1}};
    out_.write_summary(summary);
    throw error(diverged_);
  }

  /// One epoch's steps; evaluation time inside it (eval_steps) is not training time.
  void run_epoch(int epoch) {
    const auto t_epoch = clock_type::now();
    epoch_ = {};
    double paused = 0;
    models::batch b;
    while (step_ < total_steps_ && !stopped()) {
      const auto t0 = clock_type::now();
      if (!batches_.next(b, &trainer_.pool()))
        break;
      const auto t1 = clock_type::now();
      trainer_.set_dropout_key(models::dropout_key(cfg_.seed, 0, step_));
      models::step_result r;
      if (!step_or_stop(b, r))
        break;
      if (!dev_.is_cpu())
        kernels::backend_for(dev_).synchronize();
      const auto t2 = clock_type::now();
      tr_.span("data", t0, t1, step_);
      tr_.span("compute", t1, t2, step_);
      ++step_;
      samples_ += b.size;
      w_.loss += r.loss_sum;
      w_.correct += r.correct;
      w_.samples += r.samples;
      epoch_.loss += r.loss_sum;
      epoch_.correct += r.correct;
      epoch_.samples += r.samples;
      last_epoch_loss_.add(r.loss_sum, r.samples);
      ++w_.steps;
      w_.data_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
      w_.compute_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
      if (step_ % cfg_.log_every == 0)
        flush_window(epoch);
      const bool by_time = cfg_.checkpoint_every_s > 0 && seconds_since(last_checkpoint_) >= cfg_.checkpoint_every_s;
      if (((cfg_.checkpoint_every > 0 && step_ % cfg_.checkpoint_every == 0) || by_time) && step_ < total_steps_) {
        last_checkpoint_ = clock_type::now();
        train_seconds_ += seconds_since(t_epoch) - paused; // as of now, for the manifest
        save_checkpoint();
        train_seconds_ -= seconds_since(t_epoch) - paused;
      }
      if (cfg_.eval_steps > 0 && step_ % cfg_.eval_steps == 0 && step_ % steps_per_epoch_ != 0 &&
          step_ < total_steps_) {
        const double before = train_seconds_;
        train_seconds_ += seconds_since(t_epoch) - paused; // as of now, for the record
        paused += evaluate(epoch);
        train_seconds_ = before;
      }
      const double elapsed = train_seconds_ + seconds_since(t_epoch) - paused;
      progress_.update(epoch, cfg_.epochs, step_, total_steps_, elapsed > 0 ? static_cast<double>(samples_) / elapsed : 0,
                       w_.samples ? w_.loss / static_cast<double>(w_.samples) : last_loss_);
    }
    train_seconds_ += seconds_since(t_epoch) - paused;
    flush_window(epoch);
    if (epoch_.samples > 0) { // the epoch line: means over the whole epoch, not its last log window
      epoch_loss_ = epoch_.loss / static_cast<double>(epoch_.samples);
      epoch_acc_ = static_cast<double>(epoch_.correct) / static_cast<double>(epoch_.samples);
    }
  }

  void flush_window(int epoch) {
    if (w_.steps == 0)
      return;
    last_loss_ = w_.loss / static_cast<double>(w_.samples);
    last_train_acc_ = static_cast<double>(w_.correct) / static_cast<double>(w_.samples);
    const auto steps = static_cast<double>(w_.steps);
    out_.metric({{"type", "step"}, {"time", time_base_ + seconds_since(t_start_)}, {"worker", 0}, {"epoch", epoch},
                 {"step", step_}, {"samples", samples_}, {"loss", last_loss_}, {"train_accuracy", last_train_acc_},
                 {"steps", w_.steps}, {"compute_ms", w_.compute_ms / steps}, {"data_ms", w_.data_ms / steps},
                 {"comm_ms", 0.0}, {"wait_ms", 0.0}, {"staleness", 0}, {"staleness_p99", 0},
                 {"lr", scheduled_lr(trainer_.optim().spec(), step_)}});
    w_ = {};
  }

  /// Evaluates on the test set; returns the seconds it took.
  double evaluate(int epoch) {
    const auto te = clock_type::now();
    last_eval_ = trainer_.evaluate(data_.test);
    eval_seconds_ += seconds_since(te);
    tr_.since("evaluate", te, step_);
    evaluated_ = true;
    out_.metric({{"type", "eval"}, {"time", time_base_ + seconds_since(t_start_)}, {"epoch", epoch}, {"step", step_},
                 {"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss},
                 {"train_seconds", train_seconds_}});
    out_.flush();
    if (cfg_.target_accuracy > 0 && time_to_target_.is_null() && last_eval_.accuracy >= cfg_.target_accuracy)
      time_to_target_ = train_seconds_;
    return seconds_since(te);
  }

  nlohmann::json summary_json() const {
    const double sps = train_seconds_ > 0 ? static_cast<double>(samples_) / train_seconds_ : 0;
    auto or_null = [this](double v) { return evaluated_ ? nlohmann::json(v) : nlohmann::json(nullptr); };
    return {
      {"name", cfg_.name},
      {"status", stopped() ? "interrupted" : "completed"},
      {"topology", "single"},
      {"workers", 1},
      {"shards", 0},
      {"model", cfg_.model.kind},
      {"parameters", model_.parameter_count()},
      {"dataset", cfg_.dataset},
      {"device", cfg_.device},
      {"precision", cfg_.precision},
      {"threads", trainer_.threads()},
      {"parallelism", trainer_.strategy() == models::parallelism::layer ? "layer" : "batch"},
      {"batch_size", cfg_.batch_size},
      {"optimizer", cfg_.opt.kind},
      {"lr", cfg_.opt.lr},
      {"lr_applied", scheduled_optimizer(cfg_, data_.train.size()).lr},
      {"lr_schedule", cfg_.lr_schedule},
      {"warmup_epochs", cfg_.warmup_epochs},
      {"momentum_warmup_epochs", cfg_.momentum_warmup_epochs},
      {"epochs", cfg_.epochs},
      {"steps", step_},
      {"samples", samples_},
      {"wall_seconds", seconds_since(t_start_)},
      {"train_seconds", train_seconds_},
      {"eval_seconds", eval_seconds_},
      {"samples_per_sec", sps},
      {"final_loss", last_epoch_loss_.mean()},
      {"final_loss_steps", last_epoch_loss_.steps()},
      {"final_train_accuracy", last_train_acc_},
      {"final_test_accuracy", or_null(last_eval_.accuracy)},
      {"final_test_loss", or_null(last_eval_.loss)},
      {"target_accuracy", cfg_.target_accuracy > 0 ? nlohmann::json(cfg_.target_accuracy) : nlohmann::json(nullptr)},
      {"time_to_target", time_to_target_},
      {"staleness", staleness_summary({step_})}, // one worker: every step at staleness 0
      {"per_worker", {{{"worker", 0}, {"samples_per_sec", sps}, {"steps", step_}, {"batch_size", cfg_.batch_size}}}},
      {"flops_per_sample_train", model_.train_flops_per_sample()},
    };
  }

  const clock_type::time_point t_start_ = clock_type::now();
  run_config cfg_;
  run_options opts_;
  progress_line progress_;
  data_pair data_;
  kernels::device dev_;
  models::model model_;
  models::trainer trainer_;
  models::batcher batches_;
  results_writer out_;
  std::shared_ptr<actors::tracer> tracer_;
  actors::trace_ref tr_;
  trace_output trace_out_;
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0, step_ = 0, samples_ = 0;
  double train_seconds_ = 0, eval_seconds_ = 0, last_loss_ = 0, last_train_acc_ = 0;
  struct { double loss = 0; std::int64_t correct = 0, samples = 0; } epoch_; ///< this epoch so far
  double epoch_loss_ = 0, epoch_acc_ = 0; ///< the last finished epoch's means
  models::recent_mean last_epoch_loss_;   ///< final_loss: the last epoch's worth of steps
  /// The metrics window: steps since the last step record.
  struct window {
    double loss = 0, data_ms = 0, compute_ms = 0;
    std::int64_t correct = 0, samples = 0, steps = 0;
  } w_;
  models::eval_result last_eval_;
  bool evaluated_ = false;
  nlohmann::json time_to_target_ = nullptr;
  std::unique_ptr<checkpoint_writer> checkpoints_;
  clock_type::time_point last_checkpoint_ = clock_type::now(); ///< train.checkpoint_every_s counts from here
  std::int64_t resumed_from_ = -1;
  bool abortable_ = false;
  std::string diverged_;      ///< train.on_nonfinite = "stop": the worker and step, and what was not finite
  std::int64_t skipped_ = 0; ///< steps train.on_nonfinite = "skip" dropped
  kernels::tensor state_before_; ///< the state as the step began (step_or_stop)
  double time_base_ = 0; ///< a resumed run's records go on from the checkpoint's time
};

} // namespace

nlohmann::json run_single(run_config cfg, const run_options& opts) {
  use_precision(cfg, checked_device(cfg.device, cfg.device_where)); // before the data is loaded
  start_run(cfg, !opts.resume.empty());
  return single_run(std::move(cfg), opts).run();
}

} // namespace gradwire::scheduler
