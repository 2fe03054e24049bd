#include "scheduler/app/single_run.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "models/batcher.hpp"
#include "models/trainer.hpp"
#include "scheduler/app/data_source.hpp"
#include "scheduler/app/progress.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/trace_file.hpp"

#include <fmt/format.h>

#include <chrono>

namespace gradwire::scheduler {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

} // namespace

nlohmann::json run_single(run_config cfg, const run_options& opts) {
  const auto t_start = clock_type::now();
  progress_line progress(opts.progress);
  auto data = load_data(cfg);
  const auto dev = kernels::parse_device(cfg.device);
  models::model model(cfg.model, dev, cfg.seed);
  models::trainer trainer(model, cfg.opt, cfg.threads, models::parse_parallelism(cfg.parallelism));
  models::batcher batches(data.train, models::shard_indices(data.train.size(), 0, 1, cfg.seed),
                          cfg.batch_size, cfg.seed);
  results_writer out(cfg.out);
  out.write_file("config.toml", cfg.resolved_toml);
  auto tracer = cfg.trace ? std::make_shared<actors::tracer>(static_cast<std::size_t>(cfg.trace_spans)) : nullptr;
  const auto tr = actors::trace_ref::open(tracer, "worker 0"); // data, compute (forward, backward, update), evaluate
  trace_output trace_out(tracer, cfg.out, cfg.name, 1);

  progress.note(fmt::format("gradwire: {} | {} ({} parameters) on {} x {} thread(s) | {} train / {} "
                            "test samples | results in {}",
                            cfg.name, cfg.model.kind, model.parameter_count(), cfg.device,
                            trainer.threads(), data.train.size(), data.test.size(), cfg.out));

  const std::int64_t steps_per_epoch = batches.batches_per_epoch();
  std::int64_t total_steps = steps_per_epoch * cfg.epochs;
  if (cfg.max_steps > 0)
    total_steps = std::min(total_steps, cfg.max_steps);

  models::batch b;
  std::int64_t step = 0, samples = 0;
  double train_seconds = 0, eval_seconds = 0;
  double window_loss = 0, window_data_ms = 0, window_compute_ms = 0;
  std::int64_t window_correct = 0, window_samples = 0, window_steps = 0;
  double last_loss = 0, last_train_acc = 0;
  models::eval_result last_eval;
  bool evaluated = false;
  nlohmann::json time_to_target = nullptr;
  std::string status = "completed";
  auto stopped = [&] { return opts.stop != nullptr && opts.stop->load(); };

  auto flush_window = [&](int epoch) {
    if (window_steps == 0)
      return;
    last_loss = window_loss / static_cast<double>(window_samples);
    last_train_acc = static_cast<double>(window_correct) / static_cast<double>(window_samples);
    out.metric({{"type", "step"},
                {"time", seconds_since(t_start)},
                {"worker", 0},
                {"epoch", epoch},
                {"step", step},
                {"samples", samples},
                {"loss", last_loss},
                {"train_accuracy", last_train_acc},
                {"steps", window_steps},
                {"compute_ms", window_compute_ms / static_cast<double>(window_steps)},
                {"data_ms", window_data_ms / static_cast<double>(window_steps)},
                {"comm_ms", 0.0},
                {"wait_ms", 0.0},
                {"staleness", 0}});
    window_loss = window_data_ms = window_compute_ms = 0;
    window_correct = window_samples = window_steps = 0;
  };

  // Evaluation time is not training time: `paused` collects it within an epoch.
  double paused = 0;
  auto evaluate = [&](int epoch) {
    const auto te = clock_type::now();
    last_eval = trainer.evaluate(data.test);
    eval_seconds += seconds_since(te);
    tr.since("evaluate", te, step);
    evaluated = true;
    out.metric({{"type", "eval"},
                {"time", seconds_since(t_start)},
                {"epoch", epoch},
                {"step", step},
                {"test_accuracy", last_eval.accuracy},
                {"test_loss", last_eval.loss},
                {"train_seconds", train_seconds}});
    out.flush();
    if (cfg.target_accuracy > 0 && time_to_target.is_null() && last_eval.accuracy >= cfg.target_accuracy)
      time_to_target = train_seconds;
    return seconds_since(te);
  };

  for (int epoch = 1; epoch <= cfg.epochs && step < total_steps && !stopped(); ++epoch) {
    const auto t_epoch = clock_type::now();
    paused = 0;
    for (;;) {
      if (step >= total_steps || stopped())
        break;
      const auto t0 = clock_type::now();
      if (!batches.next(b, &trainer.pool()))
        break;
      const auto t1 = clock_type::now();
      auto r = trainer.step(b.x.data(), b.y.data(), b.size);
      if (!dev.is_cpu())
        kernels::backend_for(dev).synchronize();
      const auto t2 = clock_type::now();
      tr.span("data", t0, t1, step);
      tr.span("compute", t1, t2, step);
      ++step;
      samples += b.size;
      window_loss += r.loss_sum;
      window_correct += r.correct;
      window_samples += r.samples;
      ++window_steps;
      window_data_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
      window_compute_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
      if (step % cfg.log_every == 0)
        flush_window(epoch);
      if (cfg.eval_steps > 0 && step % cfg.eval_steps == 0 && step % steps_per_epoch != 0 && step < total_steps) {
        const double before = train_seconds;
        train_seconds += seconds_since(t_epoch) - paused; // as of now, for the record
        paused += evaluate(epoch);
        train_seconds = before;
      }
      const double elapsed = train_seconds + seconds_since(t_epoch) - paused;
      progress.update(epoch, cfg.epochs, step, total_steps,
                      elapsed > 0 ? static_cast<double>(samples) / elapsed : 0,
                      window_samples ? window_loss / static_cast<double>(window_samples) : last_loss);
    }
    train_seconds += seconds_since(t_epoch) - paused;
    flush_window(epoch);
    if (stopped())
      break;
    const bool last = epoch == cfg.epochs || step >= total_steps;
    if (epoch % cfg.eval_every == 0 || last) {
      evaluate(epoch);
      progress.note(fmt::format("epoch {}/{}: train loss {:.4f}, train acc {:.2f}%, test loss {:.4f}, "
                                "test acc {:.2f}%, {:.0f} samples/s",
                                epoch, cfg.epochs, last_loss, 100 * last_train_acc, last_eval.loss,
                                100 * last_eval.accuracy,
                                train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0));
    }
  }
  progress.finish();
  if (stopped())
    status = "interrupted";
  out.flush();

  const double sps = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  nlohmann::json summary = {
    {"name", cfg.name},
    {"status", status},
    {"topology", "single"},
    {"workers", 1},
    {"shards", 0},
    {"model", cfg.model.kind},
    {"parameters", model.parameter_count()},
    {"dataset", cfg.dataset},
    {"device", cfg.device},
    {"threads", trainer.threads()},
    {"parallelism", trainer.strategy() == models::parallelism::layer ? "layer" : "batch"},
    {"batch_size", cfg.batch_size},
    {"optimizer", cfg.opt.kind},
    {"lr", cfg.opt.lr},
    {"epochs", cfg.epochs},
    {"steps", step},
    {"samples", samples},
    {"wall_seconds", seconds_since(t_start)},
    {"train_seconds", train_seconds},
    {"eval_seconds", eval_seconds},
    {"samples_per_sec", sps},
    {"final_loss", last_loss},
    {"final_train_accuracy", last_train_acc},
    {"final_test_accuracy", evaluated ? nlohmann::json(last_eval.accuracy) : nlohmann::json(nullptr)},
    {"final_test_loss", evaluated ? nlohmann::json(last_eval.loss) : nlohmann::json(nullptr)},
    {"target_accuracy", cfg.target_accuracy > 0 ? nlohmann::json(cfg.target_accuracy) : nlohmann::json(nullptr)},
    {"time_to_target", time_to_target},
    {"staleness", staleness_summary({step})}, // one worker: every step at staleness 0
    {"per_worker", {{{"worker", 0}, {"samples_per_sec", sps}, {"steps", step}, {"batch_size", cfg.batch_size}}}},
    {"flops_per_sample_train", model.train_flops_per_sample()},
  };
  out.write_summary(summary);
  return summary;
}

} // namespace gradwire::scheduler
