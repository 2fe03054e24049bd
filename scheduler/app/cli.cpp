// The command line: what each subcommand does (cli_options.cpp declares them).
#include "scheduler/app/cli.hpp"

#include "kernels/error.hpp"
#include "kernels/log.hpp"
#include "kernels/stop_request.hpp"
#include "scheduler/app/build_info.hpp"
#include "scheduler/app/checkpoint.hpp"
#include "scheduler/app/cli_options.hpp"
#include "scheduler/app/compare.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/model_file.hpp"
#include "scheduler/app/replay.hpp"
#include "scheduler/app/report.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/batch_order.hpp"
#include "scheduler/app/sample.hpp"
#include "scheduler/app/single_run.hpp"
#include "scheduler/app/tensorboard.hpp"
#include "scheduler/app/sweep.hpp"
#include "scheduler/app/topology_run.hpp"
#include "scheduler/app/version.hpp"
#include "scheduler/runtime/bench_allreduce.hpp"
#include "scheduler/runtime/coordinator.hpp"
#include "scheduler/runtime/launch.hpp"
#include "transport/launch_env.hpp"
#include "transport/shm_arena.hpp"

#include <fmt/format.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

namespace gradwire::scheduler {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  if (g_stop.exchange(true))
    std::_Exit(130); // second Ctrl-C: leave at once
}

/// Ctrl-C and SIGTERM set g_stop from one thread of their own, never from a
/// thread that computes: from here on the calling thread, and every thread
/// it starts (the trainer's pool, CAF's workers, UCX's progress thread),
/// blocks them; only this signal thread (and threads made before, such as
/// OpenBLAS's idle workers or an embedding interpreter's) can take them. A
/// handler that runs on a thread inside oneDNN's JIT GEMM can corrupt that
/// thread's data (tests/scheduler/resume.sh stops such runs under load).
void route_stop_signals() {
  kernels::set_stop_request(&g_stop); // the waits no step boundary ends look at it too
  struct sigaction act {};
  act.sa_handler = on_sigint;
  sigemptyset(&act.sa_mask);
  ::sigaction(SIGINT, &act, nullptr);
  ::sigaction(SIGTERM, &act, nullptr); // as Ctrl-C: stop at the step boundary, keep what was trained
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  static std::once_flag once;
  std::call_once(once, [stop] {
    std::thread([stop] {
      pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
      for (;;)
        ::pause(); // the handler runs here
    }).detach();
  });
}

/// The caller's handlers and mask, put back when an embedded command ends.
class saved_signals {
public:
  saved_signals() {
    ::sigaction(SIGINT, nullptr, &int_);
    ::sigaction(SIGTERM, nullptr, &term_);
    pthread_sigmask(SIG_SETMASK, nullptr, &mask_);
  }
  void restore() const {
    ::sigaction(SIGINT, &int_, nullptr);
    ::sigaction(SIGTERM, &term_, nullptr);
    pthread_sigmask(SIG_SETMASK, &mask_, nullptr);
  }

private:
  struct sigaction int_ {}, term_ {};
  sigset_t mask_{};
};

/// Writes DIR/report.html and says where (or why there are no plots).
void report_on(const std::string& dir) {
  auto r = write_report(dir);
  std::printf("report: %s (%zu plot(s))\n", r.html.c_str(), r.plots);
  if (r.plots == 0)
    std::printf("report: %s\n", r.problem.c_str());
}

/// run --procs N | workers: -1 stands for "as many as topology.workers".
void parse_run_procs(cli_args& a) {
  if (!a.chose("run") || a.run_procs.empty())
    return;
  if (a.run_procs == "workers") {
    a.procs = -1;
    return;
  }
  std::size_t used = 0;
  try {
    a.procs = std::stoi(a.run_procs, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != a.run_procs.size() || a.procs < 1)
    throw gradwire::error("--procs " + a.run_procs + ": expected a number of processes (1 or more) or `workers`");
}

/// A sweep's axes: --sweep, or the config's [sweep.variants] (the slowest
/// axis) and [sweep], in the driving process only.
std::vector<sweep_axis> sweep_axes(const cli_args& a,
                                                         const std::optional<run_config>& base,
                                                         int ranks, bool launched_child) {
  if (!a.sweeps.empty() && ranks > 1)
    throw gradwire::error("a sweep is driven by one process: run it without srun/mpirun, with --procs N or "
                          "--procs workers for points across processes");
  std::vector<sweep_axis> axes;
  for (const auto& s : a.sweeps)
    axes.push_back(parse_sweep(s));
  if (!base || !axes.empty() || ranks != 1 || launched_child)
    return axes;
  if (!base->sweep_variants.empty()) {
    sweep_axis v{"variant", {}, {}, base->sweep_paired};
    for (const auto& [label, sets] : base->sweep_variants) {
      v.values.push_back(label);
      v.sets.push_back(sets);
    }
    axes.push_back(std::move(v));
  }
  for (const auto& [key, values] : base->sweep)
    axes.push_back({key, values, {}});
  return axes;
}

/// topology.kind = "single" is one worker in one process.
void check_single(cli_args& a, const run_config& base, int ranks, bool launched_child) {
  if (a.procs == -1)
    a.procs = 0;
  if (a.procs > 1)
    throw gradwire::error(base.source + ": topology.kind = \"single\" trains one worker in one process: drop --procs " +
                          std::to_string(a.procs) +
                          ", or choose a topology of several workers (e.g. --set topology.kind=\"ring\")");
  if (ranks > 1 && !launched_child)
    throw gradwire::error("topology.kind = \"single\" trains one worker in one process, but this is one of " +
                          std::to_string(ranks) + " ranks (srun/mpirun): choose a topology of several workers");
}

/// Starts `procs` local processes with this command line less --procs.
int relaunch(int procs, int argc, char** argv, int restarts) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--procs" || arg == "-p")
      ++i;
    else if (arg.rfind("--procs=", 0) != 0)
      args.push_back(arg);
  }
  return launch_local(procs, args, restarts);
}

run_options run_options_of(const cli_args& a) {
  route_stop_signals();
  std::signal(SIGXFSZ, SIG_IGN); // over a file-size limit: a write error the results writer reports, not a kill
  run_options o;
  o.progress = !a.quiet;
  o.force = a.force;
  o.stop = &g_stop;
  o.resume = a.resume;
  o.resume_step = a.resume_step;
  return o;
}

/// The line a finished run ends with.
void print_outcome(const run_config& cfg, const nlohmann::json& summary) {
  auto acc = summary["final_test_accuracy"];
  std::printf("%s: %s in %.1f s, %.0f samples/s, test accuracy %s, results in %s\n", cfg.name.c_str(),
              summary["status"].get<std::string>().c_str(), summary["wall_seconds"].get<double>(),
              summary["samples_per_sec"].get<double>(),
              acc.is_null() ? "n/a" : fmt::format("{:.2f}%", 100 * acc.get<double>()).c_str(), cfg.out.c_str());
}

/// One experiment in this process (or as one rank of a job).
int run_experiment(const cli_args& a, run_config cfg) {
  if (!a.out_dir.empty())
    cfg.out = a.out_dir;
  const auto opts = run_options_of(a);
  auto summary = cfg.single() ? run_single(cfg, opts)
                              : run_actors(cfg, opts);
  if (summary.contains("rank")) // a rank other than 0 of a multi-process job: rank 0 reports
    return g_stop ? 130 : 0;
  print_outcome(cfg, summary);
  if (!a.no_report)
    report_on(cfg.out);
  return g_stop ? 130 : 0;
}

/// What a replay's cut of the records left out, and why ("": nothing).
std::string left_out(const nlohmann::json& rec) {
  const auto entries = rec["entries_left_out"].get<std::int64_t>(), updates = rec["updates_left_out"].get<std::int64_t>();
  if (updates > 0)
    return fmt::format("; {} update(s) past the last one every shard's record holds were left out: the run was cut "
                       "short", updates);
  if (entries > 0)
    return fmt::format("; {} pulls for steps their workers never finished were left out", entries);
  return {};
}

/// What a replay followed, and whether it came out the run's bits.
void print_replay(const cli_args& a, const run_config& cfg, const nlohmann::json& facts) {
  const auto& rec = facts["record"];
  if (rec.is_null())
    std::printf("replay: a lock-step run, deterministic without a record: its config ran again\n");
  else
    std::printf("replay: %lld %s followed in the recorded order%s\n",
                static_cast<long long>(rec["entries"].get<std::int64_t>()),
                rec.value("mixers", 0) > 0 ? "AD-PSGD store events" : "updates and pulls", left_out(rec).c_str());
  namespace fs = std::filesystem;
  const auto theirs = (fs::path(a.replay_dir) / "model.safetensors").string();
  if (!fs::exists(theirs))
    std::printf("replay: %s has no model.safetensors to compare with (the run did not finish)\n", a.replay_dir.c_str());
  else if (same_tensors(theirs, cfg.out + "/model.safetensors"))
    std::printf("replay: model.safetensors holds the run's parameters, bit for bit\n");
  else
    std::printf("replay: model.safetensors differs from the run's%s\n",
                a.overrides.empty() ? "" : " (--set changed the algorithm; the schedule was the run's)");
}

/// gradwire replay: a recorded run again in this process.
int run_replay(const cli_args& a) {
  check(gradwire::transport::detect_launch().size == 1,
        "gradwire replay runs in one process: start it without srun, mpirun or --procs");
  const auto src = open_replay({a.replay_dir, a.out_dir, a.overrides});
  claim_results_folder(src.cfg.out, a.force, "replay");
  auto opts = run_options_of(a);
  opts.replay = src.cut;
  opts.replay_facts = src.facts;
  const auto summary = run_actors(src.cfg, opts);
  print_outcome(src.cfg, summary);
  print_replay(a, src.cfg, src.facts);
  if (!a.no_report)
    report_on(src.cfg.out);
  return g_stop ? 130 : 0;
}

/// The subcommands that read results folders: report, export, compare.
std::optional<int> run_results_tool(const cli_args& a) {
  if (a.chose("report")) {
    report_on(a.report_dir);
    return 0;
  }
  if (a.chose("export")) {
    for (const auto& tb : export_tensorboard(a.export_dir))
      std::printf("tensorboard: %s\n", tb.c_str());
    return 0;
  }
  if (a.chose("compare")) {
    const auto r = write_comparison(a.compare_runs, a.compare_out.empty() ? "results/compare" : a.compare_out, a.force);
    std::printf("compare: %s (%zu plot(s))\n", r.html.c_str(), r.plots);
    if (r.plots == 0)
      std::printf("compare: %s\n", r.problem.c_str());
    return 0;
  }
  return std::nullopt;
}

/// The subcommands that run no experiment: bench allreduce, keys, report, eval, sample, batches, info.
std::optional<int> run_tool(cli_args& a) {
  if (auto status = run_results_tool(a))
    return status;
  if (a.chose("allreduce")) {
    a.ab.min_bytes = parse_bytes(a.ab_min, "--minbytes");
    a.ab.max_bytes = parse_bytes(a.ab_max, "--maxbytes");
    a.ab.chunk_bytes = parse_bytes(a.ab_chunk, "--chunk");
    a.ab.ring_from_bytes = a.ab_ring_from == "auto" ? 0 : parse_bytes(a.ab_ring_from, "--ring-from");
    return bench_allreduce(a.ab);
  }
  if (a.chose("keys")) {
    std::fputs(describe_keys().c_str(), stdout);
    return 0;
  }
  if (a.chose("eval")) {
    const auto e = evaluate_model_file(a.eval_path, a.overrides);
    const bool bytes = e.dataset == "text", ids = e.dataset == "tokens";
    std::printf("%s: test accuracy %.2f%%, test loss %.4f%s (%lld test %s of %s)\n", e.file.c_str(),
                100 * e.accuracy, e.loss, bytes ? " nats per byte" : ids ? " nats per token" : "",
                static_cast<long long>(e.samples), bytes || ids ? "windows" : "images", e.dataset.c_str());
    return 0;
  }
  if (a.chose("sample")) {
    sample_text(a.sampling, [](const char* bytes, std::size_t n) { // bytes: any of them, NUL too
      std::fwrite(bytes, 1, n, stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    return 0;
  }
  if (a.chose("batches")) {
    write_batch_order(load_config(a.config_path, a.overrides), a.batch_steps, stdout);
    return 0;
  }
  if (a.chose("info")) {
    std::fputs(build_info().c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

/// The run's config: the file given, or with --resume the run folder's own
/// config.toml (the resolved config it ran with), results in that folder.
run_config run_config_of(cli_args& a) {
  if (a.resume.empty()) {
    if (a.config_path.empty())
      throw gradwire::error("gradwire run: give a config file (or --resume RUN_DIR)");
    return load_config(a.config_path, a.overrides);
  }
  namespace fs = std::filesystem;
  fs::path dir(a.resume);
  if (fs::exists(dir / "MANIFEST.json")) // a checkpoint's folder: RUN_DIR/checkpoints/step-N
    dir = dir.parent_path().parent_path();
  if (a.config_path.empty())
    a.config_path = (dir / "config.toml").string();
  if (!a.sweeps.empty())
    throw gradwire::error("--resume continues one run: drop --sweep");
  auto cfg = load_config(a.config_path, a.overrides);
  // Saved after lost workers: the run goes on with the survivors.
  const int survivors = checkpoint_workers(a.resume, a.resume_step);
  if (survivors > 0 && survivors != cfg.workers) {
    if (!std::getenv("GRADWIRE_RANK") && gradwire::transport::detect_launch().rank == 0)
      gradwire::log::warn("the checkpoint was saved after the run lost workers: resuming with its {} surviving worker(s), "
        "renumbered 0 to {}, without the config's [[faults]]", survivors, survivors - 1);
    cfg = load_config_of_survivors(a.config_path, a.overrides, survivors);
  }
  if (a.out_dir.empty())
    a.out_dir = dir.string();
  return cfg;
}

int dispatch(cli_args& a, int argc, char** argv) {
  parse_run_procs(a);
  if (a.chose("replay"))
    return run_replay(a);
  // The config, read once: the sweep, the launch and the run all use it.
  std::optional<run_config> base;
  if (a.chose("run"))
    base = run_config_of(a);
  const int ranks = gradwire::transport::detect_launch().size;
  const bool launched_child = std::getenv("GRADWIRE_RANK") != nullptr;
  const auto axes = sweep_axes(a, base, ranks, launched_child);
  if (!axes.empty()) {
    std::vector<std::string> failed;
    auto dir =
      run_sweep(a.config_path, a.overrides, axes, a.out_dir, run_options_of(a), a.procs, &failed);
    if (!a.no_report)
      report_on(dir);
    if (!failed.empty() && !g_stop) // (a stop ends the point's job with an error too)
      throw gradwire::error(std::to_string(failed.size()) + " point(s) of the sweep failed (rows marked unfinished in " +
                            dir + "/sweep.md); the first: " + failed.front());
    return g_stop ? 130 : 0;
  }
  if (base && base->single())
    check_single(a, *base, ranks, launched_child);
  if (base && a.procs == -1) // as many processes as workers
    a.procs = base->workers;
  // One process claims the results folder: this one, before it starts the
  // ranks (--procs), or rank 0 of srun / mpirun.
  if (base && !launched_child && gradwire::transport::detect_launch().rank == 0 && a.resume.empty())
    claim_results_folder(a.out_dir.empty() ? base->out : a.out_dir, a.force, "run");
  if (a.procs > 0 && !launched_child)
    return relaunch(a.procs, argc, argv, base ? base->restarts : 0);
  if (auto status = run_tool(a))
    return *status;
  return run_experiment(a, std::move(*base));
}

} // namespace

int cli_main(int argc, char** argv, cli_embedding* embed) {
  const saved_signals callers;
  g_stop = false;
  cli_args a;
  if (auto status = parse_command_line(argc, argv, a, embed != nullptr ? &embed->error : nullptr))
    return *status;
  if (!a.log_level.empty())
    log::set_level(*log::parse_level(a.log_level));
  int rc = 0;
  try {
    rc = dispatch(a, argc, argv);
  } catch (const gradwire::error& e) {
    log::error("{}", e.what());
    if (embed != nullptr)
      embed->error = e.what();
    // A wait that a stop ended says so, and exits as a stop does.
    rc = dynamic_cast<const kernels::stopped*>(&e) != nullptr ? 130 : 2;
  } catch (const std::exception& e) {
    log::error("internal error: {}", e.what());
    if (embed != nullptr)
      embed->error = std::string("internal error: ") + e.what();
    rc = 1;
  }
  if (embed != nullptr) {
    callers.restore();
    if (actors_abandoned() && embed->error.empty())
      embed->error = "the run left its actors running: start a fresh process before the next run";
    return actors_abandoned() && rc == 0 ? 2 : rc;
  }
  if (actors_abandoned()) { // (its actor system is left running: no exit() through it)
    std::fflush(nullptr);
    transport::unlink_arenas(); // no destructors run from here: nothing of this process stays in /dev/shm
    std::_Exit(rc == 0 ? 2 : rc);
  }
  return rc;
}

} // namespace gradwire::scheduler
