#include "scheduler/app/topology_run.hpp"

#include "actors/system_config.hpp"
#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/app/data_source.hpp"
#include "scheduler/app/progress.hpp"
#include "scheduler/runtime/topology.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/step_breakdown.hpp"
#include "scheduler/app/trace_file.hpp"
#include "scheduler/runtime/job.hpp"
#include "transport/launch_env.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <limits>
#include <map>
#include <numeric>

namespace gradwire::scheduler {

namespace {

topology_kind kind_of(const std::string& k) {
  if (k == "local-sgd")
    return topology_kind::local_sgd;
  if (k == "ring")
    return topology_kind::ring;
  if (k == "hierarchical")
    return topology_kind::hierarchical;
  if (k == "gossip")
    return topology_kind::gossip;
  return topology_kind::parameter_server;
}

/// What the topology does each step, for the first line of a run.
std::string describe(const run_config& cfg) {
  if (cfg.topology == "local-sgd")
    return fmt::format("local SGD, average every {} steps", cfg.local_steps);
  const std::string balanced =
    cfg.balance_every > 0 ? fmt::format(", batches balanced every {} steps", cfg.balance_every) : "";
  if (cfg.topology == "ring")
    return fmt::format("ring allreduce, {} KiB buckets{}{}", cfg.bucket_kb, cfg.overlap ? ", overlapped" : "", balanced);
  if (cfg.topology == "hierarchical")
    return fmt::format("hierarchical allreduce, groups of {}{}", cfg.group_size, balanced);
  if (cfg.topology == "gossip")
    return fmt::format("gossip {} on a {} graph", cfg.gossip == "dpsgd" ? "D-PSGD" : "AD-PSGD", cfg.graph);
  std::string s = "parameter server, " + cfg.mode;
  if (cfg.mode == "sync" && cfg.backup_workers > 0)
    s += fmt::format(", {} backup worker(s)", cfg.backup_workers);
  if (cfg.mode != "sync" && cfg.dc_lambda > 0)
    s += fmt::format(", DC-ASGD lambda {}", cfg.dc_lambda);
  return s + fmt::format(", {} shard(s)", cfg.shards);
}

} // namespace

nlohmann::json run_actors(run_config cfg, const run_options& opts) {
  const auto t_start = std::chrono::steady_clock::now();
  progress_line progress(opts.progress);
  auto data = load_data(cfg);
  topology_setup setup;
  setup.kind = kind_of(cfg.topology);
  setup.spec = cfg.model;
  setup.opt = cfg.opt;
  setup.workers = cfg.workers;
  setup.shards = cfg.shards;
  setup.sync = cfg.mode == "sync";
  setup.staleness_lr = cfg.staleness_lr;
  setup.staleness_bound = cfg.mode == "ssp" ? cfg.staleness_bound : -1;
  setup.backup = cfg.backup_workers;
  setup.dc_lambda = static_cast<float>(cfg.dc_lambda);
  setup.push_pull = cfg.push_pull;
  const bool local = cfg.topology == "local-sgd";
  setup.local_steps = local ? cfg.local_steps : 0;
  setup.bucket_floats = static_cast<std::size_t>(cfg.bucket_kb) * 256;
  setup.chunk_floats = static_cast<std::size_t>(cfg.chunk_kb) * 256;
  setup.overlap = cfg.overlap;
  setup.balance_every = cfg.balance_every;
  setup.sharded_update = cfg.sharded_update;
  setup.group_size = cfg.group_size;
  setup.gossip = cfg.gossip == "adpsgd" ? actors::gossip_mode::adpsgd : actors::gossip_mode::dpsgd;
  setup.graph = cfg.graph;
  setup.degree = cfg.degree;
  setup.distinct_init = !cfg.same_init;
  setup.batch_size = cfg.batch_size;
  setup.threads = cfg.threads;
  setup.how = models::parse_parallelism(cfg.parallelism);
  setup.seed = cfg.seed;
  setup.log_every = cfg.log_every;
  if (cfg.trace)
    setup.trace = std::make_shared<actors::tracer>(static_cast<std::size_t>(cfg.trace_spans));
  // Devices: train.device for every worker, or each group's own. A GPU that
  // is not there is an error naming the group, before anything starts.
  auto device_of = [&](const std::string& text, const std::string& who) {
    const auto d = kernels::parse_device(text);
    if (!d.is_cpu()) {
      check(kernels::built_with_cuda(), cfg.source + ": " + who + " device " + text +
                                          ": this gradwire was built without CUDA (gradwire info)");
      const int n = kernels::cuda_device_count();
      check(d.index < n, cfg.source + ": " + who + " device " + text + ", but " + std::to_string(n) +
                           " CUDA device(s) are visible (gradwire info)");
    }
    return d;
  };
  if (cfg.nodes.empty()) {
    const auto d = device_of(cfg.device, "train.device:");
    setup.worker_device.assign(static_cast<std::size_t>(cfg.workers), d);
  }
  for (const auto& g : cfg.nodes)
    for (int i = 0; i < g.count; ++i) {
      setup.worker_device.push_back(device_of(g.device.empty() ? cfg.device : g.device, "[[nodes]] group '" + g.name + "':"));
      setup.worker_threads.push_back(g.threads > 0 ? g.threads : cfg.threads);
      setup.worker_batch.push_back(g.batch_size > 0 ? g.batch_size : cfg.batch_size);
      setup.worker_slowdown.push_back(g.slowdown);
      setup.worker_delay_ms.push_back(g.delay_ms);
      setup.worker_jitter_ms.push_back(g.jitter_ms);
    }
  // Every worker runs the same number of full batches (sync needs it): as
  // many as the worker with the largest batch has in an epoch.
  int largest = cfg.batch_size;
  for (int b : setup.worker_batch)
    largest = std::max(largest, b);
  const std::int64_t per_worker = data.train.size() / cfg.workers;
  const std::int64_t per_epoch = per_worker / largest;
  check(per_epoch >= 1, cfg.source + ": each of the " + std::to_string(cfg.workers) + " workers gets " +
                          std::to_string(per_worker) + " samples, fewer than its batch size " +
                          std::to_string(largest));
  setup.steps = per_epoch * cfg.epochs;
  if (cfg.max_steps > 0)
    setup.steps = std::min(setup.steps, cfg.max_steps);

  caf::actor_system_config sys_cfg;
  gradwire::actors::configure_scheduler(sys_cfg, 2);
  caf::actor_system sys{sys_cfg};
  // Across processes (srun, mpirun, --procs): one worker per process, rank 0
  // coordinates and writes the results.
  std::optional<job> jb;
  struct close_on_exit { // before the actor system goes: published actors must be let go
    std::optional<job>& j;
    topology_setup& s;
    ~close_on_exit() {
      if (j)
        j->node->close();
      s.node.reset();
    }
  } closer{jb, setup};
  {
    int threads = 0;
    for (int r = 0; r < cfg.workers; ++r)
      threads += static_cast<std::size_t>(r) < setup.worker_threads.size() ? setup.worker_threads[static_cast<std::size_t>(r)] : cfg.threads;
    setup.spin_wait = spin_wait_default(threads);
  }
  if (transport::detect_launch().size > 1) {
    job_options jo;
    jo.tls = cfg.transport_tls;
    jo.spin_us = cfg.spin_us;
    // Workers that poll the link while they wait deliver their own frames;
    // the progress thread only covers their computing, and should not
    // preempt them at each frame (ucx_options::progress_nice).
    jo.progress_nice = cfg.progress_nice >= 0 ? cfg.progress_nice : (setup.spin_wait && cfg.spin_us == 0 ? 19 : 0);
    jo.shm_refs = cfg.shm_refs;
    jo.live.peer_timeout_ms = cfg.peer_timeout_ms;
    jo.shape.latency_us = cfg.latency_us;
    jo.shape.bandwidth_gbps = cfg.bandwidth_gbps;
    jb = join_job(sys, jo);
    const int rank = jb->launch.rank;
    setup.node = jb->node;
    setup.spread_shards = cfg.shard_placement == "spread";
    setup.sync_ranks = [&sys, &jb, &setup](int epoch) { barrier(sys, *jb, epoch, static_cast<int>(setup.timeout.count())); };
    publish_barrier(sys, *jb);
    setup.on_published = [&sys, &jb, rank] {
      auto node = jb->node;
      jb->node->start([node, rank](int peer, const std::string& what) {
        actors::worker_report failed;
        failed.rank = peer;
        failed.error = "the process of rank " + std::to_string(peer) + " failed: " + what;
        if (rank == 0) // the coordinator fails the run naming the rank, or carries on without it
          caf::anon_send(node->remote(0, transport::slots::coordinator), actors::done_atom::value, failed, true);
        else if (peer == 0) { // the coordinator is gone (other ranks are rank 0's business)
          std::fprintf(stderr, "gradwire: rank %d: stopping: %s\n", rank, failed.error.c_str());
          std::fflush(stderr);
          std::_Exit(3);
        }
      }, jb->live);
      barrier(sys, *jb, 0);
    };
    if (rank != 0) {
      run_topology(sys, setup, data.train, {}, {}, opts.stop);
      if (setup.trace) // before the barrier: rank 0 merges the parts after it
        write_trace_part(cfg.out, rank, trace_part(*setup.trace, rank));
      barrier(sys, *jb, 1, static_cast<int>(setup.timeout.count()));
      jb->node->close();
      return {{"status", "completed"}, {"rank", rank}, {"processes", jb->launch.size}};
    }
  }
  results_writer out(cfg.out);
  out.write_file("config.toml", cfg.resolved_toml);
  // trace.json is written however the run ends (a failure too); on success
  // after the other ranks' parts are in.
  trace_output trace_out(setup.trace, cfg.out, cfg.name, jb ? jb->launch.size : 1);
  progress.note(fmt::format("gradwire: {} | {} | {} worker(s) x {} thread(s) | {} | {} steps per worker | results in {}",
                            cfg.name, describe(cfg), cfg.workers, cfg.threads, cfg.model.kind, setup.steps, cfg.out));
  const auto t_train = std::chrono::steady_clock::now();
  const std::int64_t total_steps = setup.steps * cfg.workers;
  // Evaluations during the run: worker 0's replica, on this thread while
  // the workers go on (the time they take counts as training time here).
  models::model eval_model(cfg.model, kernels::device::cpu(), cfg.seed);
  models::trainer eval_trainer(eval_model, cfg.opt, cfg.threads);
  nlohmann::json time_to_target = nullptr;
  const auto coord_trace = actors::trace_ref::open(setup.trace, "coordinator");
  auto eval_record = [&](std::int64_t step, double secs, const models::eval_result& e) {
    out.metric({{"type", "eval"}, {"time", secs}, {"train_seconds", secs}, {"step", step},
                {"epoch", static_cast<double>(step) / static_cast<double>(per_epoch)},
                {"test_accuracy", e.accuracy}, {"test_loss", e.loss}});
    out.flush();
    if (cfg.target_accuracy > 0 && time_to_target.is_null() && e.accuracy >= cfg.target_accuracy)
      time_to_target = secs;
  };
  setup.eval_every = cfg.eval_steps > 0 ? cfg.eval_steps : per_epoch * cfg.eval_every;
  // BatchNorm statistics come with the parameters (as DDP takes rank 0's buffers).
  auto set_state = [&](const actors::slice& state) {
    if (state.defined() && state.numel() == eval_model.state().numel())
      std::copy(state.data(), state.data() + state.numel(), eval_model.state().data());
  };
  setup.on_eval = [&](std::int64_t step, const actors::slice& params, const actors::slice& state) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_train).count();
    if (static_cast<std::size_t>(params.numel()) != eval_model.size())
      return; // not this model's parameters (cannot happen with our workers)
    std::copy(params.data(), params.data() + eval_model.size(), eval_model.params().data());
    set_state(state);
    const auto te = std::chrono::steady_clock::now();
    auto e = eval_trainer.evaluate(data.test);
    eval_record(step, secs, e);
    coord_trace.since("evaluate", te, step);
  };
  auto res = run_topology(sys, setup, data.train, [&](std::int64_t steps, std::int64_t samples) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_train).count();
    progress.update(0, 0, steps, total_steps, secs > 0 ? static_cast<double>(samples) / secs : 0,
                    std::numeric_limits<double>::quiet_NaN());
  }, [&, last_samples = std::map<int, std::int64_t>{}](const actors::step_metrics& m) mutable {
    // The window's mean batch (balancing moves it; otherwise the worker's own).
    auto& last = last_samples[m.rank];
    const double batch = m.steps > 0 ? static_cast<double>(m.samples - last) / static_cast<double>(m.steps) : 0;
    last = m.samples;
    out.metric({{"type", "step"}, {"time", m.time}, {"worker", m.rank}, {"step", m.step},
                {"samples", m.samples}, {"steps", m.steps}, {"batch", batch}, {"loss", m.loss},
                {"compute_ms", m.compute_ms}, {"comm_ms", m.comm_ms}, {"wait_ms", m.wait_ms},
                {"staleness", m.staleness}});
  }, opts.stop);
  // On the clock of the evaluations during the run (res.seconds starts
  // later, when the topology is wired: a final record stamped with it
  // could come before the last of those).
  const double trained_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_train).count();
  progress.finish();
  if (jb) { // every worker has reported: let the other ranks go
    barrier(sys, *jb, 1);
    jb->node->close();
  }

  auto& final_model = eval_model;
  std::copy(res.params.begin(), res.params.end(), final_model.params().data());
  for (const auto& rep : res.reports) // worker 0's statistics (the first that reported any)
    if (rep.state.defined()) {
      set_state(rep.state);
      break;
    }
  const auto t_eval = std::chrono::steady_clock::now();
  auto eval = eval_trainer.evaluate(data.test);
  coord_trace.since("evaluate", t_eval, setup.steps);
  trace_out.write();

  std::int64_t samples = 0;
  double loss = 0;
  nlohmann::json per_worker_json = nlohmann::json::array();
  for (const auto& rep : res.reports) {
    samples += rep.samples;
    loss += rep.last_loss / static_cast<double>(res.reports.size());
    const auto ri = static_cast<std::size_t>(rep.rank);
    nlohmann::json w = {{"worker", rep.rank},
                        {"batch_size", ri < setup.worker_batch.size() ? setup.worker_batch[ri] : cfg.batch_size},
                        {"slowdown", ri < setup.worker_slowdown.size() ? setup.worker_slowdown[ri] : 1.0},
                        {"device", ri < setup.worker_device.size() ? kernels::to_string(setup.worker_device[ri]) : "cpu"},
                        {"threads", ri < setup.worker_threads.size() ? setup.worker_threads[ri] : cfg.threads},
                        {"steps", rep.steps},
                        {"samples", rep.samples},
                        {"mean_batch", rep.steps > 0 ? static_cast<double>(rep.samples) / static_cast<double>(rep.steps) : 0.0},
                        {"samples_per_sec", rep.seconds > 0 ? static_cast<double>(rep.samples) / rep.seconds : 0},
                        {"compute_seconds", rep.compute_seconds},
                        {"comm_seconds", rep.comm_seconds},
                        {"wait_seconds", rep.wait_seconds},
                        {"dropped_pushes", ri < res.dropped.size() ? res.dropped[ri] : 0},
                        {"final_loss", rep.last_loss},
                        {"staleness", staleness_summary(histogram_of(rep.staleness))}};
    nlohmann::json record = {{"type", "worker"}, {"time", rep.seconds}};
    record.update(w);
    out.metric(record);
    per_worker_json.push_back(w);
  }
  eval_record(res.reports.empty() ? 0 : res.reports.front().steps, trained_secs, eval);
  const auto split = lockstep(setup) ? breakdown_of(res.reports) : step_breakdown{};
  nlohmann::json step_time = nullptr;
  if (split.steps > 0)
    step_time = {{"compute", split.compute}, {"imbalance", split.imbalance}, {"exchange", split.exchange}};
  nlohmann::json summary = {
    {"name", cfg.name},
    {"status", res.interrupted ? "interrupted" : "completed"},
    {"topology", cfg.topology},
    {"mode", cfg.topology == "parameter-server" ? cfg.mode : cfg.topology == "gossip" ? cfg.gossip : cfg.topology},
    {"description", describe(cfg)},
    {"local_steps", local ? nlohmann::json(cfg.local_steps) : nlohmann::json(nullptr)},
    {"workers", cfg.workers},
    {"processes", jb ? jb->launch.size : 1},
    {"launch", jb ? jb->launch.source : "single process"},
    {"shards", cfg.shards},
    {"model", cfg.model.kind},
    {"parameters", final_model.parameter_count()},
    {"dataset", cfg.dataset},
    {"threads_per_worker", cfg.threads},
    {"batch_size", cfg.batch_size},
    {"optimizer", cfg.opt.kind},
    {"lr", cfg.opt.lr},
    {"staleness_lr", cfg.staleness_lr},
    {"staleness_bound", cfg.mode == "ssp" ? nlohmann::json(cfg.staleness_bound) : nlohmann::json(nullptr)},
    {"max_clock_gap", res.max_clock_gap},
    {"replica_spread", res.replica_spread},
    {"lost_workers", res.lost},
    {"dropped_pushes", std::accumulate(res.dropped.begin(), res.dropped.end(), std::int64_t{0})},
    {"steps_per_worker", setup.steps},
    {"samples", samples},
    {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()},
    {"train_seconds", res.seconds},
    {"samples_per_sec", res.seconds > 0 ? static_cast<double>(samples) / res.seconds : 0},
    {"final_loss", loss},
    {"final_test_accuracy", eval.accuracy},
    {"final_test_loss", eval.loss},
    {"target_accuracy", cfg.target_accuracy > 0 ? nlohmann::json(cfg.target_accuracy) : nlohmann::json(nullptr)},
    {"time_to_target", time_to_target},
    {"staleness", staleness_summary(res.staleness)},
    {"step_time", step_time},
    {"per_worker", per_worker_json},
  };
  out.write_summary(summary);
  progress.note(fmt::format("test accuracy {:.2f}%, test loss {:.4f}, mean staleness {:.2f}",
                            100 * eval.accuracy, eval.loss, summary["staleness"]["mean"].get<double>()));
  if (split.steps > 0)
    progress.note(fmt::format("step time: {:.1f}% compute, {:.1f}% waiting for slower workers, {:.1f}% exchange",
                              100 * split.compute, 100 * split.imbalance, 100 * split.exchange));
  return summary;
}

} // namespace gradwire::scheduler
