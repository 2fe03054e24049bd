#include "scheduler/app/run_summary.hpp"

#include "kernels/log.hpp"
#include "models/batcher.hpp"
#include "scheduler/app/step_breakdown.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gradwire::scheduler {

namespace {

using clock_type = std::chrono::steady_clock;

/// compression.kind as summary.json gives it (null: dense).
/// A worker's mean relative compression error; null when it compressed nothing.
nlohmann::json compress_error(double sum, std::int64_t steps) {
  const double mean = steps > 0 ? sum / static_cast<double>(steps) : -1;
  return mean >= 0 && std::isfinite(mean) ? nlohmann::json(mean) : nlohmann::json(nullptr);
}

nlohmann::json compress_summary(const models::compress_spec& z, const std::vector<actors::worker_report>& reports) {
  if (z.mode == models::compress_mode::none)
    return nullptr;
  double sum = 0;
  std::int64_t steps = 0;
  for (const auto& r : reports) {
    sum += r.compress_error_sum;
    steps += r.compressed_steps;
  }
  nlohmann::json j{{"mode", models::compress_name(z.mode)}, {"error_feedback", z.error_feedback}};
  if (z.mode == models::compress_mode::topk || z.mode == models::compress_mode::randk)
    j["ratio"] = z.ratio;
  if (z.mode == models::compress_mode::powersgd)
    j["rank"] = z.rank;
  if (z.warmup > 0)
    j["warmup"] = z.warmup;
  j["sent"] = z.update ? "optimizer step" : z.momentum ? "momentum" : "gradient";
  j["error"] = compress_error(sum, steps);
  return j;
}

std::int64_t bytes_total(const std::vector<actors::worker_report>& reports, std::int64_t actors::worker_report::*field) {
  std::int64_t total = 0;
  for (const auto& r : reports)
    total += r.*field;
  return total;
}

/// How many of each class worker `rank`'s starting shard holds (a
/// label-skewed partition: data.partition = "dirichlet").
nlohmann::json label_histogram(const models::dataset& data, const topology_setup& setup, int rank) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(std::max(setup.spec.classes, 1)), 0);
  for (auto i : models::shard_indices(data, rank, setup.workers, setup.seed, setup.partition)) {
    const auto c = static_cast<std::size_t>(*data.label(i));
    if (c >= counts.size())
      counts.resize(c + 1, 0);
    ++counts[c];
  }
  return counts;
}

/// The stretch of the corpus worker `rank`'s starting shard covers
/// (data.partition = "contiguous"): [its first window's first byte, its
/// last window's end).
nlohmann::json byte_range(const models::dataset& data, const topology_setup& setup, int rank) {
  const auto idx = models::contiguous_shard_indices(data, rank, setup.workers);
  if (idx.empty())
    return nullptr;
  const auto at = [&data](std::int64_t i) { return data.offsets[static_cast<std::size_t>(i)]; };
  return {at(idx.front()), at(idx.back()) + data.width + 1}; // a window is context + 1 bytes
}

/// per_worker's entry of summary.json for one worker's report.
nlohmann::json worker_summary(const actors::worker_report& rep, const topology_setup& setup, const run_config& cfg,
                              const topology_outcome& res) {
  const auto ri = static_cast<std::size_t>(rep.rank);
  return {{"worker", rep.rank},
          {"batch_size", ri < setup.worker_batch.size() ? setup.worker_batch[ri] : cfg.batch_size},
          {"slowdown", ri < setup.worker_slowdown.size() ? setup.worker_slowdown[ri] : 1.0},
          {"device", cfg.model.kind == "torch" ? cfg.model.torch_device // (the module's; the buffers are in host memory)
                     : ri < setup.worker_device.size() ? kernels::to_string(setup.worker_device[ri]) : "cpu"},
          {"threads", ri < setup.worker_threads.size() ? setup.worker_threads[ri] : cfg.threads},
          {"steps", rep.steps},
          {"samples", rep.samples},
          {"mean_batch", rep.steps > 0 ? static_cast<double>(rep.samples) / static_cast<double>(rep.steps) : 0.0},
          {"samples_per_sec", rep.seconds > 0 ? static_cast<double>(rep.samples) / rep.seconds : 0},
          {"compute_seconds", rep.compute_seconds},
          {"comm_seconds", rep.comm_seconds},
          {"wait_seconds", rep.wait_seconds},
          {"bytes_sent", rep.bytes_sent},
          {"bytes_received", rep.bytes_received},
          {"dropped_pushes", ri < res.dropped.size() ? res.dropped[ri] : 0},
          {"final_loss", rep.last_loss},
          {"staleness", staleness_summary(histogram_of(rep.staleness))},
          {"compress_error", compress_error(rep.compress_error_sum, rep.compressed_steps)}};
}

/// Each worker's metrics windows as (seconds since it started, steps done).

/// Every lost worker on the coordinator's timeline: from detection until
/// the survivors went on, and away until it came back.
void trace_faults(const actors::trace_ref& coord_trace, const std::vector<fault_record>& faults) {
  for (const auto& fr : faults) {
    const auto at = [&fr](double s) {
      return fr.origin + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(s));
    };
    coord_trace.span("worker lost (arg: rank)", at(fr.detected_at),
                     at(fr.recovered_at >= fr.detected_at ? fr.recovered_at : fr.detected_at + 1e-3), fr.rank);
    if (fr.rejoined_at >= 0)
      coord_trace.span("worker away (arg: rank)", at(fr.detected_at), at(fr.rejoined_at), fr.rank);
  }
}

nlohmann::json partition_facts(const models::partition_spec& p) {
  if (p.kind == "dirichlet")
    return {{"kind", p.kind}, {"alpha", p.alpha}};
  if (p.kind == "classes")
    return {{"kind", p.kind}, {"classes_per_worker", p.classes}};
  return {{"kind", p.kind}};
}

} // namespace

double scheduled_lr(const models::optimizer_spec& opt, std::int64_t step) {
  return opt.lr * opt.schedule.lr_factor(static_cast<double>(std::max<std::int64_t>(0, step - 1)));
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

run_listeners listeners(progress_line& progress, results_writer& out, clock_type::time_point t_train,
                        std::int64_t total_steps, double time_offset, const models::optimizer_spec& opt) {
  run_listeners l;
  l.progress = [&progress, t_train, total_steps](std::int64_t steps, std::int64_t samples) {
    const double secs = since(t_train);
    progress.update(0, 0, steps, total_steps, secs > 0 ? static_cast<double>(samples) / secs : 0,
                    std::numeric_limits<double>::quiet_NaN());
  };
  l.metrics = [&out, windows = l.windows, time_offset, opt,
               last_samples = std::map<int, std::int64_t>{}](const actors::step_metrics& in) mutable {
    auto m = in;
    m.time += time_offset; // a resumed run goes on from the checkpoint's time
    (*windows)[m.rank].emplace_back(in.time, m.step);
    // The window's mean batch (balancing moves it; otherwise the worker's own).
    auto& last = last_samples[m.rank];
    const double batch = m.steps > 0 ? static_cast<double>(m.samples - last) / static_cast<double>(m.steps) : 0;
    last = m.samples;
    nlohmann::json record{{"type", "step"}, {"time", m.time}, {"worker", m.rank}, {"step", m.step},
                          {"samples", m.samples}, {"steps", m.steps}, {"batch", batch}, {"loss", m.loss},
                          {"compute_ms", m.compute_ms}, {"comm_ms", m.comm_ms}, {"wait_ms", m.wait_ms},
                          {"staleness", m.staleness}, {"staleness_p99", m.staleness_p99},
                          {"bytes_sent", m.bytes_sent}, {"bytes_received", m.bytes_received},
                          {"lr", scheduled_lr(opt, m.step)}};
    if (m.compress_error >= 0 && std::isfinite(m.compress_error))
      record["compress_error"] = m.compress_error;
    out.metric(std::move(record));
  };
  return l;
}

namespace {

/// The final model's evaluation into `f`; true when it was made now. A
/// stopped run skips it, as it skips the snapshots not yet evaluated (an
/// evaluation can outlast a stop's grace): `f.eval` is then the latest
/// evaluation made during the run, if any (as a single run's), and the
/// model written is evaluated by `gradwire eval DIR`.
bool final_evaluation(run_facts& f, evaluator& ev, const actors::trace_ref& coord_trace) {
  if (f.res.interrupted) {
    if (const auto dropped = ev.abandon(); dropped > 0)
      log::info("the stop skipped {} snapshot evaluation(s) not yet made", dropped);
  } else {
    ev.drain(); // the snapshots first: their records precede the final one
  }
  std::copy(f.res.params.begin(), f.res.params.end(), ev.model.params().data());
  for (const auto& rep : f.res.reports) // worker 0's statistics (the first that reported any)
    if (rep.state.defined()) {
      ev.set_state(rep.state);
      break;
    }
  if (f.res.interrupted) {
    const auto latest = ev.latest();
    f.evaluated = latest.has_value();
    f.eval = latest.value_or(models::eval_result{});
    return false;
  }
  const auto t_eval = clock_type::now();
  f.eval = ev.evaluate_model();
  f.evaluated = true;
  coord_trace.since("evaluate", t_eval, f.setup.steps);
  return true;
}

} // namespace

/// The final model's evaluation and the per-worker records; fills `f`.
void finish_run(run_facts& f, evaluator& ev, results_writer& out, const actors::trace_ref& coord_trace,
                double trained_secs) {
  const bool evaluated_now = final_evaluation(f, ev, coord_trace);
  trace_faults(coord_trace, f.res.faults);
  f.per_worker = nlohmann::json::array();
  // While every worker ran: until the first finished (by its own clock;
  // the workers start together). A worker's pushes then are those up to
  // its last metrics window before that time (train.log_every steps apart).
  double all_ran = std::numeric_limits<double>::infinity();
  for (std::size_t r = 0; r < f.res.reports.size(); ++r)
    if (std::find(f.res.lost.begin(), f.res.lost.end(), static_cast<int>(r)) == f.res.lost.end())
      all_ran = std::min(all_ran, f.res.reports[r].seconds);
  std::vector<std::int64_t> all_ran_values;
  for (const auto& rep : f.res.reports) {
    f.samples += rep.samples;
    f.loss += rep.last_loss / static_cast<double>(f.res.reports.size());
    auto w = worker_summary(rep, f.setup, f.cfg, f.res);
    if (f.train != nullptr && f.setup.partition.by_label())
      w["labels"] = label_histogram(*f.train, f.setup, rep.rank);
    if (f.train != nullptr && f.setup.partition.kind == "contiguous")
      w["bytes"] = byte_range(*f.train, f.setup, rep.rank);
    if (!rep.staleness.empty() && f.windows != nullptr) {
      std::int64_t steps_then = 0;
      if (auto it = f.windows->find(rep.rank); it != f.windows->end())
        for (const auto& [t, step] : it->second)
          if (t <= all_ran)
            steps_then = std::max(steps_then, step);
      const auto k = std::min<std::size_t>(static_cast<std::size_t>(steps_then), rep.staleness.size());
      const std::vector<std::int64_t> early(rep.staleness.begin(), rep.staleness.begin() + static_cast<std::ptrdiff_t>(k));
      w["staleness_while_all_ran"] = staleness_summary(histogram_of(early));
      all_ran_values.insert(all_ran_values.end(), early.begin(), early.end());
    }
    nlohmann::json record = {{"type", "worker"}, {"time", rep.seconds}};
    record.update(w);
    out.metric(record);
    f.per_worker.push_back(w);
  }
  f.staleness_all_ran = nullptr;
  if (!all_ran_values.empty()) {
    f.staleness_all_ran = staleness_summary(histogram_of(all_ran_values));
    f.staleness_all_ran["seconds"] = all_ran;
  }
  if (evaluated_now)
    ev.record(f.res.reports.empty() ? 0 : f.res.reports.front().steps, trained_secs, f.eval);
  f.time_to_target = ev.time_to_target;
  f.parameters = static_cast<std::int64_t>(ev.model.parameter_count());
  const auto split = lockstep(f.setup) ? breakdown_of(f.res.reports) : step_breakdown{};
  f.step_time = nullptr;
  if (split.steps > 0)
    f.step_time = {{"compute", split.compute}, {"imbalance", split.imbalance}, {"exchange", split.exchange}};
}

nlohmann::json summary_of(const run_facts& f) {
  const auto& cfg = f.cfg;
  const auto& res = f.res;
  const auto& family = *f.setup.family;
  return {
    {"name", cfg.name},
    {"status", res.interrupted ? "interrupted" : "completed"},
    {"budget", f.setup.budget_samples > 0 ? "shared" : "per-worker"},
    {"budget_samples", f.setup.budget_samples > 0 ? nlohmann::json(f.setup.budget_samples) : nlohmann::json(nullptr)},
    {"topology", cfg.topology},
    {"mode", family.mode(f.setup)},
    {"description", family.describe(f.setup)},
    {"local_steps", family.takes_local_steps ? nlohmann::json(cfg.ps.local_steps) : nlohmann::json(nullptr)},
    {"allreduce", !family.sums_buckets ? nlohmann::json(nullptr)
                  : f.setup.comm       ? nlohmann::json("collective")
                                       : nlohmann::json("actors")},
    {"workers", cfg.workers},
    {"processes", f.jb ? f.jb->launch.size : 1},
    {"launch", f.jb ? f.jb->launch.source : "single process"},
    {"shards", f.setup.ps.shards},
    {"model", cfg.model.kind},
    {"parameters", f.parameters},
    {"dataset", cfg.dataset},
    {"partition", partition_facts(cfg.partition)},
    {"precision", cfg.precision},
    {"threads_per_worker", cfg.threads},
    {"batch_size", cfg.batch_size},
    {"optimizer", cfg.opt.kind},
    {"lr", cfg.opt.lr},
    {"lr_applied", f.setup.opt.lr}, // after the linear scaling rule (train.lr_base_batch)
    {"lr_schedule", cfg.lr_schedule},
    {"warmup_epochs", cfg.warmup_epochs},
    {"momentum_warmup_epochs", cfg.momentum_warmup_epochs},
    {"staleness_lr", cfg.ps.staleness_lr},
    {"rule", cfg.ps.python_rule() ? nlohmann::json(cfg.ps.rule()) : nlohmann::json(nullptr)}, // topology.ps.rule
    {"staleness_bound", cfg.ps.staleness_bound >= 0 ? nlohmann::json(cfg.ps.staleness_bound) : nlohmann::json(nullptr)},
    {"max_clock_gap", res.max_clock_gap},
    {"replica_spread", res.replica_spread},
    {"lost_workers", res.lost},
    {"dropped_pushes", std::accumulate(res.dropped.begin(), res.dropped.end(), std::int64_t{0})},
    {"steps_per_worker", f.setup.steps},
    {"samples", f.samples},
    {"wall_seconds", f.wall_seconds},
    {"train_seconds", res.seconds},
    {"samples_per_sec", res.seconds > 0 ? static_cast<double>(f.samples) / res.seconds : 0},
    {"final_loss", f.loss},
    {"final_test_accuracy", f.evaluated ? nlohmann::json(f.eval.accuracy) : nlohmann::json(nullptr)},
    {"final_test_loss", f.evaluated ? nlohmann::json(f.eval.loss) : nlohmann::json(nullptr)},
    {"eval", f.eval_during ? "during" : "after"},
    {"target_accuracy", cfg.target_accuracy > 0 ? nlohmann::json(cfg.target_accuracy) : nlohmann::json(nullptr)},
    {"time_to_target", f.time_to_target},
    {"staleness", staleness_summary(res.staleness)},
    {"compress", compress_summary(cfg.compress, res.reports)},
    {"bytes_sent", bytes_total(res.reports, &actors::worker_report::bytes_sent)},
    {"bytes_received", bytes_total(res.reports, &actors::worker_report::bytes_received)},
    {"staleness_while_all_ran", f.staleness_all_ran},
    {"step_time", f.step_time},
    {"per_worker", f.per_worker},
  };
}

void add_token_figures(nlohmann::json& summary, const run_config& cfg) {
  if (cfg.model.kind != "gpt")
    return;
  const double per_sample = cfg.model.context;
  const auto number = [&](const char* key) {
    const auto it = summary.find(key);
    return it != summary.end() && it->is_number() ? it->get<double>() : -1.0;
  };
  if (const double n = number("samples"); n >= 0)
    summary["tokens"] = n * per_sample;
  if (const double sps = number("samples_per_sec"); sps >= 0)
    summary["tokens_per_sec"] = sps * per_sample;
  const double loss = number("final_test_loss");
  summary["final_test_perplexity"] = loss >= 0 ? nlohmann::json(std::exp(loss)) : nlohmann::json(nullptr);
}

std::string failure_status(const std::string& what) {
  return what.find("diverged at step ") != std::string::npos ? "diverged" : "failed";
}

} // namespace gradwire::scheduler
