#include "scheduler/app/topology_run.hpp"
#include "scheduler/app/run_summary.hpp"
#include "kernels/log.hpp"
#include "scheduler/app/virtual_run.hpp"

#include "actors/system_config.hpp"
#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "kernels/stop_request.hpp"
#include "models/model.hpp"
#include "scheduler/app/checkpoint.hpp"
#include "scheduler/app/data_source.hpp"
#include "scheduler/app/evaluator.hpp"
#include "scheduler/app/join_across.hpp"
#include "scheduler/app/model_file.hpp"
#include "scheduler/app/progress.hpp"
#include "scheduler/app/replay.hpp"
#include "scheduler/app/run_id.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/step_breakdown.hpp"
#include "scheduler/app/trace_file.hpp"
#include "scheduler/app/wiring_setup.hpp"
#include "scheduler/runtime/job.hpp"
#include "transport/shm_arena.hpp"
#include "scheduler/runtime/coordinator.hpp"
#include "scheduler/runtime/topology.hpp"
#include "transport/launch_env.hpp"
#include "transport/ucx_link.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <thread>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>

namespace gradwire::scheduler {

namespace {

using clock_type = std::chrono::steady_clock;


/// A rank other than 0: runs its worker, hands in its trace part, waits
/// for rank 0 to have every report.
nlohmann::json run_follower(caf::actor_system& sys, const run_config& cfg, topology_setup& setup, job& jb,
                            const models::dataset& train, const run_options& opts) {
  const int rank = jb.launch.rank;
  run_topology(sys, setup, train, {}, {}, opts.stop);
  if (setup.trace) // before the barrier: rank 0 merges the parts after it
    write_trace_part(cfg.out, rank, trace_part(*setup.trace, rank));
  // Rank 0 may take a while to get there (stopping a worker stuck in a step
  // takes up to 60 s, the shards are collected): no step timeout here. Its
  // death ends this rank anyway (its transport's word, join_across).
  barrier(sys, jb, 1, static_cast<int>(std::max<std::int64_t>(setup.timeout.count(), 300000)));
  jb.node->close();
  return {{"status", "completed"}, {"rank", rank}, {"processes", jb.launch.size}};
}

} // namespace

namespace {

/// The run's actor system. An actor that never ended when told to
/// (stop_actors gave it up) holds the system's destructor for ever: the
/// system is then left to the process's end, which main brings with
/// std::_Exit once the results are written.
struct run_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  explicit run_system(bool virtual_clock) {
    if (virtual_clock) // one event at a time on CAF's test coordinator (virtual_time.hpp)
      configure_virtual(cfg);
    else
      gradwire::actors::configure_scheduler(cfg, 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  run_system(const run_system&) = delete;
  run_system& operator=(const run_system&) = delete;
  ~run_system() {
    if (actors_abandoned())
      (void)sys.release();
  }
};

/// Before the actor system goes: published actors must be let go, and a
/// simulation's actors end while the system is there.
struct close_on_exit {
  std::optional<job>& j;
  topology_setup& s;
  ~close_on_exit() {
    if (j && j->launch.rank == 0 && std::uncaught_exceptions() > 0) // the others need not wait out the liveness bound
      j->node->fence_all("rank 0 ended the job with an error (its output says which)");
    // A stop (Ctrl-C, SIGTERM) must end the run promptly: sends still in
    // flight to a stalled peer get half a second.
    if (j)
      j->node->close(kernels::stop_requested() ? 500 : 5000);
    s.node.reset();
    if (s.sim) {
      s.sim->stop();
      s.sim->shut_down();
      s.sim.reset();
    }
  }
};

/// --resume: the checkpoint (checked against this run's identity) every
/// actor starts from; none without.
std::optional<loaded_checkpoint> resume_from(const run_options& opts, const nlohmann::json& identity,
                                              topology_setup& setup) {
  if (opts.resume.empty())
    return std::nullopt;
  auto resumed = load_checkpoint(opts.resume, opts.resume_step);
  check_identity(resumed, identity);
  setup.resume = resumed.point;
  return resumed;
}

/// The training seconds of the run a resume continues (0: a fresh run).
double seconds_before(const std::optional<loaded_checkpoint>& resumed) {
  return resumed && resumed->manifest["run"].contains("train_seconds")
           ? resumed->manifest["run"]["train_seconds"].get<double>()
           : 0.0;
}

/// experiment.clock = "virtual": the simulation every worker runs on.
void start_virtual(caf::actor_system& sys, const run_config& cfg, const models::dataset& train,
                   topology_setup& setup, nlohmann::json& clock_facts) {
  check(transport::detect_launch().size == 1,
        cfg.source + ": experiment.clock = \"virtual\" simulates every worker in one process: run it without "
                     "--procs or a launcher");
  setup.threads = 1; // every gradient on the loop's one thread: the models give the time
  setup.worker_threads.assign(setup.worker_threads.size(), 1);
  setup.sim = make_simulation(sys, cfg, train, clock_facts);
}

/// The run's first line.
std::string banner(const run_config& cfg, const topology_setup& setup) {
  return fmt::format("gradwire: {} | {}{} | {} worker(s) x {} thread(s) | {} | {} | results in {}", cfg.name,
                     setup.family->describe(setup), cfg.virt.on ? " | virtual clock" : "", cfg.workers,
                     setup.threads, cfg.model.kind,
                     setup.budget_samples > 0
                       ? fmt::format("{} samples shared out by speed (train.budget)", setup.budget_samples)
                       : fmt::format("{} steps per worker", setup.steps),
                     cfg.out);
}

/// train.eval = "auto": during the run where a core is left over from the
/// workers' threads, else after it (evaluating on the workers' cores slows
/// them: bench/RESULTS.md, "Evaluation off the critical path").
bool evaluate_during(const run_config& cfg, const topology_setup& setup) {
  std::size_t worker_threads = 0;
  for (int r = 0; r < cfg.workers; ++r)
    worker_threads += static_cast<std::size_t>(r) < setup.worker_threads.size()
                        ? static_cast<std::size_t>(setup.worker_threads[static_cast<std::size_t>(r)])
                        : static_cast<std::size_t>(cfg.threads);
  return cfg.eval_mode == "during" ||
         (cfg.eval_mode == "auto" && std::thread::hardware_concurrency() > worker_threads);
}

/// Where checkpoints go (train.checkpoint_every, _s, or a stop that keeps
/// one): a writer, and setup.on_checkpoint handing it every complete one.
/// Null where none are kept.
std::unique_ptr<checkpoint_writer> checkpoint_sink(const run_config& cfg, const run_options& opts,
                                                   const nlohmann::json& identity,
                                                   const std::optional<loaded_checkpoint>& resumed,
                                                   const evaluator& ev, double time_offset, topology_setup& setup) {
  if (cfg.checkpoint_every <= 0 && cfg.checkpoint_every_s <= 0 && opts.stop == nullptr) // Ctrl-C keeps one too
    return nullptr;
  auto writer = std::make_unique<checkpoint_writer>(cfg.out, cfg.keep_checkpoints, identity);
  // A run resumed with the survivors of lost workers says so in its own
  // checkpoints: a later resume again starts from config.toml's count.
  const auto lost_before = resumed && resumed->manifest["run"].is_object()
                             ? resumed->manifest["run"].value("lost_workers", nlohmann::json::array())
                             : nlohmann::json::array();
  setup.on_checkpoint = [w = writer.get(), &ev, time_offset, lost_before](std::int64_t step,
                                                                          std::vector<actors::snapshot_frame> parts) {
    nlohmann::json run = {{"train_seconds", time_offset + since(ev.t_train)}};
    if (!lost_before.empty())
      run["lost_workers"] = lost_before;
    w->submit(step, std::move(parts), std::move(run));
  };
  return writer;
}

/// A failed run still says what happened, in its own folder.
void write_failure(results_writer& out, const run_config& cfg, const topology_setup& setup,
                   const std::optional<job>& jb, const std::string& what, double wall_seconds) {
  out.flush();
  const auto lost = out.failure();
  if (!lost.empty() && lost != what) // the run failed otherwise, and the disk is full too
    log::error("{}", lost);
  nlohmann::json summary = {{"name", cfg.name},
                     {"status", failure_status(what)},
                     {"error", what},
                     {"topology", cfg.topology},
                     {"description", setup.family->describe(setup)},
                     {"workers", cfg.workers},
                     {"processes", jb ? jb->launch.size : 1},
                     {"launch", jb ? jb->launch.source : "single process"},
                     {"steps_per_worker", setup.steps},
                     {"wall_seconds", wall_seconds}};
  int worker = -1;
  long long step = -1;
  const auto at = what.find("worker ");
  if (summary["status"] == "diverged" && at != std::string::npos &&
      std::sscanf(what.c_str() + at, "worker %d: diverged at step %lld", &worker, &step) == 2)
    summary["diverged"] = {{"worker", worker}, {"step", step}};
  out.write_summary(summary);
}

/// summary.json's "checkpoints", once every checkpoint is on disk.
nlohmann::json checkpoint_facts_of(const run_config& cfg, checkpoint_writer* checkpoints) {
  if (!checkpoints)
    return nullptr;
  checkpoints->drain();
  if (!checkpoints->error().empty())
    log::warn("a checkpoint was not written: {}", checkpoints->error());
  return {{"every", cfg.checkpoint_every}, {"every_seconds", cfg.checkpoint_every_s},
          {"written", checkpoints->written()}, {"persist_seconds", checkpoints->seconds()},
          {"error", checkpoints->error()}};
}

/// Every failure the run met: summary.json's "faults", and a metrics record each.
nlohmann::json fault_records(const std::vector<fault_record>& faults, results_writer& out) {
  const auto or_null = [](auto v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  auto all = nlohmann::json::array();
  for (const auto& fr : faults) {
    nlohmann::json j = {{"rank", fr.rank},
                        {"kind", fr.kind},
                        {"what", fr.what},
                        {"detected_at", fr.detected_at},
                        {"recovered_at", or_null(fr.recovered_at)},
                        {"at_step", fr.at_step},
                        {"steps_lost", fr.steps_lost},
                        {"workers_after", fr.workers_after},
                        {"rejoined_at", or_null(fr.rejoined_at)},
                        {"rejoined_step", or_null(fr.rejoined_step)}};
    all.push_back(j);
    j["type"] = "fault";
    j["time"] = fr.detected_at;
    out.metric(j);
  }
  return all;
}

/// The run's last lines: accuracy, loss, staleness, and where lock-step
/// steps spent their time.
void closing_notes(progress_line& progress, const run_facts& f, const nlohmann::json& summary) {
  const double staleness = summary["staleness"]["mean"].get<double>();
  if (f.res.interrupted) // the final evaluation was skipped: said even with --quiet, as the stop is
    log::info("stopped without the final evaluation: `gradwire eval {0}` evaluates {0}/model.safetensors; {1}mean "
              "staleness {2:.2f}", f.cfg.out,
              f.evaluated ? fmt::format("latest test accuracy {:.2f}%, ", 100 * f.eval.accuracy) : "", staleness);
  else
    progress.note(fmt::format("test accuracy {:.2f}%, test loss {:.4f}, mean staleness {:.2f}", 100 * f.eval.accuracy,
                              f.eval.loss, staleness));
  if (!f.step_time.is_null())
    progress.note(fmt::format("step time: {:.1f}% compute, {:.1f}% waiting for slower workers, {:.1f}% exchange",
                              100 * f.step_time["compute"].get<double>(), 100 * f.step_time["imbalance"].get<double>(),
                              100 * f.step_time["exchange"].get<double>()));
}

/// A resumed run says where it goes on from, in metrics.jsonl and on screen.
void note_resume(results_writer& out, progress_line& progress, const loaded_checkpoint& resumed, double time_offset) {
  const auto superseded = out.cut_after(resumed.point->step);
  out.metric({{"type", "resume"}, {"time", time_offset}, {"step", resumed.point->step}, {"checkpoint", resumed.dir},
              {"superseded", superseded}});
  progress.note(fmt::format("resuming from the checkpoint of step {} ({})", resumed.point->step, resumed.dir));
}

/// What rank 0 holds once training is over, for its results folder.
struct trained_run {
  const run_config& cfg;
  topology_setup& setup;
  const topology_outcome& res;
  std::optional<job>& jb;
  caf::actor_system& sys;
  evaluator& ev;
  results_writer& out;
  progress_line& progress;
  const actors::trace_ref& coord_trace;
  trace_output& trace_out;
  const data_pair& data;
  const run_listeners& listened;
  nlohmann::json& clock_facts;
  checkpoint_writer* checkpoints;
  const std::optional<loaded_checkpoint>& resumed;
  clock_type::time_point t_start;
  const run_options& opts;
};

/// The final evaluation, the trace, the model and summary.json; lets the
/// other ranks go.
nlohmann::json write_results(const trained_run& t) {
  const auto& cfg = t.cfg;
  auto& setup = t.setup;
  // On the clock of the evaluations during the run (res.seconds starts
  // later, when the topology is wired).
  const double trained_secs = setup.sim ? t.res.seconds : since(t.ev.t_train);
  if (setup.sim) {
    setup.sim->stop();
    add_simulation_cost(*setup.sim, t.clock_facts);
  }
  const auto checkpoint_facts = checkpoint_facts_of(cfg, t.checkpoints);
  t.progress.finish();
  nlohmann::json refs_sent = nullptr; // rank 0's shared-memory references, by peer (never to another host)
  if (t.jb) { // every worker has reported: let the other ranks go
    barrier(t.sys, *t.jb, 1);
    if (t.jb->link)
      refs_sent = t.jb->link->referenced_by_peer();
    t.jb->node->close();
  }
  run_facts f{cfg, setup, t.res, t.jb, {}, nullptr, nullptr, nullptr, nullptr, t.listened.windows.get(), t.ev.during};
  f.train = &t.data.train;
  finish_run(f, t.ev, t.out, t.coord_trace, trained_secs);
  t.trace_out.write();
  t.out.write_file("model.safetensors", // the run's parameters, worker 0's statistics (evaluated, unless the run stopped)
                   safetensors_of(t.ev.model, t.ev.model.params().data(), t.ev.model.state().data(),
                                  run_metadata(cfg.resolved_toml, t.ev.model.spec(), t.data.input_mean,
                                               t.data.input_std)));
  f.wall_seconds = since(t.t_start);
  auto summary = summary_of(f);
  summary["checkpoints"] = checkpoint_facts;
  summary["clock"] = t.clock_facts;
  summary["faults"] = fault_records(t.res.faults, t.out);
  t.out.flush();
  summary["resumed_from"] = t.resumed ? nlohmann::json(t.resumed->point->step) : nlohmann::json(nullptr);
  summary["shm_references_sent"] = refs_sent;
  summary["record"] = setup.record_dir.empty() ? nlohmann::json(nullptr) : record_facts(setup.record_dir);
  summary["replay"] = t.opts.replay ? t.opts.replay_facts : nlohmann::json(nullptr);
  add_token_figures(summary, cfg);
  t.out.write_summary(summary);
  closing_notes(t.progress, f, summary);
  return summary;
}

/// The results folder as the run starts: config.toml (a fresh run), a full
/// disk stopping the run, TensorBoard's files where asked.
void open_results(results_writer& out, const run_config& cfg, bool resumed, double time_offset,
                  std::atomic<bool>* stop) {
  if (!resumed)
    out.write_file("config.toml", cfg.resolved_toml);
  out.stop_on_failure(stop);
  if (cfg.tensorboard)
    out.tensorboard(time_offset);
}

/// The record (experiment.record) this run writes, or the one a replay
/// follows.
void record_or_follow(topology_setup& setup, const run_options& opts, bool resumed) {
  if (resumed) // a record follows a run from its first step: the one before the resume stays as it was
    setup.record_dir.clear();
  if (opts.replay) {
    setup.replay = opts.replay;
    setup.budget_samples = 0; // each worker runs its recorded steps, however the budget shared them out
  }
}

/// Worker 0's snapshots go to `ev`: evaluated off the workers' cores, at
/// the time worker 0 handed each over.
void evaluate_snapshots(topology_setup& setup, evaluator& ev) {
  setup.on_eval = [&ev, sim = setup.sim](std::int64_t step, const actors::slice& params, const actors::slice& state) {
    ev.submit(step, sim ? sim->eval_seconds(step) : since(ev.t_train), params, state);
  };
}

} // namespace

nlohmann::json run_actors(run_config cfg, const run_options& opts) {
  const auto t_start = clock_type::now();
  start_run(cfg, !opts.resume.empty() || !opts.replay_facts.is_null());
  progress_line progress(opts.progress);
  auto data = load_data(cfg);
  auto plan = plan_wiring(cfg, data.train);
  auto& setup = plan.setup;
  // Checkpoints and resume (checkpoint.hpp): every rank reads its part.
  const auto identity =
    checkpoint_identity(cfg, static_cast<std::int64_t>(models::model(cfg.model, kernels::device::cpu(), cfg.seed).size()));
  const auto resumed = resume_from(opts, identity, setup);
  record_or_follow(setup, opts, resumed.has_value());
  setup.checkpoint_every = cfg.checkpoint_every;
  setup.checkpoint_every_s = cfg.checkpoint_every_s;
  const double time_offset = seconds_before(resumed);
  run_system rs(cfg.virt.on);
  caf::actor_system& sys = *rs.sys;
  std::optional<job> jb; // across processes: one worker per process, rank 0 coordinates and writes the results
  close_on_exit closer{jb, setup};
  nlohmann::json clock_facts = {{"mode", "real"}};
  if (cfg.virt.on)
    start_virtual(sys, cfg, data.train, setup, clock_facts);
  setup.stop = opts.stop; // a rank of its own too: SIGTERM reaches every rank of a batch job
  if (transport::detect_launch().size > 1) {
    join_across(sys, cfg, setup, jb);
    if (jb->launch.rank != 0)
      return run_follower(sys, cfg, setup, *jb, data.train, opts);
  }
  results_writer out(cfg.out, resumed.has_value());
  out.run_id(cfg.run_id);
  std::atomic<bool> own_stop{false}; // a full disk stops the run even where no one else can
  auto* stop = opts.stop ? opts.stop : &own_stop;
  setup.stop = stop;
  open_results(out, cfg, resumed.has_value(), time_offset, stop);
  // trace.json is written however the run ends (a failure too); on success
  // after the other ranks' parts are in.
  trace_output trace_out(setup.trace, cfg.out, cfg.name, jb ? jb->launch.size : 1);
  progress.note(banner(cfg, setup));
  evaluator ev{cfg, data.test, out, progress, plan.steps_per_epoch, evaluate_during(cfg, setup)};
  const auto coord_trace = actors::trace_ref::open(setup.trace, "coordinator");
  evaluate_snapshots(setup, ev);
  auto l = listeners(progress, out, ev.t_train,
                     setup.budget_samples > 0 ? setup.budget_samples / cfg.batch_size : setup.steps * cfg.workers,
                     time_offset, setup.opt);
  const auto checkpoints = checkpoint_sink(cfg, opts, identity, resumed, ev, time_offset, setup);
  if (resumed)
    note_resume(out, progress, *resumed, time_offset);
  topology_outcome res;
  try {
    res = run_topology(sys, setup, data.train, l.progress, l.metrics, stop);
    out.flush();
    check(!out.failed(), out.failure()); // a full disk: the run stopped, and fails
  } catch (const error& e) {
    progress.finish();
    write_failure(out, cfg, setup, jb, e.what(), since(t_start));
    throw;
  }
  return write_results({cfg, setup, res, jb, sys, ev, out, progress, coord_trace, trace_out, data, l, clock_facts,
                        checkpoints.get(), resumed, t_start, opts});
}

} // namespace gradwire::scheduler
