// gradwire: the command-line entry point.
#include "kernels/log.hpp"
#include "kernels/error.hpp"
#include "scheduler/runtime/bench_allreduce.hpp"
#include "scheduler/runtime/coordinator.hpp"
#include "scheduler/app/build_info.hpp"
#include "scheduler/app/checkpoint.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/runtime/launch.hpp"
#include "scheduler/app/model_file.hpp"
#include "scheduler/app/report.hpp"
#include "scheduler/app/sample.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/topology_run.hpp"
#include "scheduler/app/single_run.hpp"
#include "scheduler/app/sweep.hpp"
#include "transport/launch_env.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  if (g_stop.exchange(true))
    std::_Exit(130); // second Ctrl-C: leave at once
}

/// Ctrl-C and SIGTERM set g_stop from one thread of their own, never from a
/// thread that computes. From here on the calling thread, and every thread
/// it starts (the trainer's pool, CAF's workers, UCX's progress thread),
/// blocks them; only this signal thread (and threads libraries made before,
/// such as OpenBLAS's idle workers) can take them. A handler that ran on a
/// thread inside oneDNN's JIT GEMM corrupted that thread's data now and
/// then: a single-worker run stopped by SIGINT under load aborted with a
/// corrupted heap in 5 of 25 runs with oneDNN's GEMMs, 0 of 25 with
/// OpenBLAS's alone, and 0 of 25 with this routing (tests/scheduler/resume.sh
/// stops such runs).
void route_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::signal(SIGINT, on_sigint);
    std::signal(SIGTERM, on_sigint); // as Ctrl-C: stop at the step boundary, keep what was trained
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::thread([stop] {
      pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
      for (;;)
        ::pause(); // the handler runs here
    }).detach();
  });
}

constexpr const char* run_help = R"(Train as the config file says: in this process, or across processes
(--procs N, or as one rank of srun / mpirun: rank and size come from
their environment, rank 0 writes the results).

The config is TOML with sections [experiment], [model], [data], [train],
[topology], [transport] and [[nodes]] groups (`gradwire keys` lists every
key, its default and meaning). Results go to
experiment.out (default results/<experiment.name>): summary.json,
metrics.jsonl (one record per train.log_every steps, plus one per
evaluation) and config.toml (the fully resolved config, to rerun exactly).

Ctrl-C stops after the current step and still writes the results folder.

Examples:
  gradwire run examples/default.toml
  gradwire run examples/lenet5.toml --set train.epochs=1 --out /tmp/lenet
  gradwire run examples/default.toml --set train.threads=2 --set model.hidden=[512,256]
  gradwire run examples/ring.toml --procs 2              (2 processes over UCX, one worker each)
  srun -n 4 gradwire run examples/ring.toml --set topology.workers=4
  gradwire run examples/ring.toml --sweep topology.workers=1,2,4,8   (scaling table))";

constexpr const char* allreduce_help = R"(Two engines, side by side. The headline columns have MPI_Allreduce's
semantics (the sum in each rank's own buffer, every byte copied): a
collective communicator driven by the calling thread: when every rank is
on this host, each adds its share from its peers' shared memory (the
ring's sums, no messages); on hosts of several ranks each (the same
number on every host), it sums within each host through shared memory and
across hosts among the ranks of one local index; otherwise it drives UCX
and its own TCP lanes, recursive doubling for small sizes and a ring for
large ones.
After the bar, an
extra column that is not MPI's semantics: the ring peers training uses
(actors; chunks as Cap'n Proto headers plus zero-copy data frames, results
read in place, by shared-memory reference on one host). Rank 0 prints
size, time per allreduce, algbw = size/time and busbw = algbw*2(n-1)/n (as
nccl-tests), and a check on inputs whose sum is known exactly. A wrong
result exits with status 4.

Examples:
  gradwire bench allreduce --procs 2
  gradwire bench allreduce --procs 4 -b 1M -e 16M --tls tcp
  srun -n 8 gradwire bench allreduce        (rank, size from SLURM; set MASTER_ADDR)
  mpirun -n 2 gradwire bench allreduce)";

/// Writes DIR/report.html and says where (or why there are no plots).
void report_on(const std::string& dir) {
  auto r = gradwire::scheduler::write_report(dir);
  std::printf("report: %s (%zu plot(s))\n", r.html.c_str(), r.plots);
  if (r.plots == 0)
    std::printf("report: %s\n", r.problem.c_str());
}

/// Everything the command line sets.
struct cli_args {
  CLI::App* run = nullptr;
  CLI::App* allreduce = nullptr;
  CLI::App* report = nullptr;
  CLI::App* keys = nullptr;
  CLI::App* eval = nullptr;
  std::string eval_path;
  CLI::App* info = nullptr;
  CLI::App* sample = nullptr;
  gradwire::scheduler::sample_options sampling;
  std::string config_path, out_dir, report_dir, run_procs;
  std::vector<std::string> overrides, sweeps;
  bool quiet = false, no_report = false, force = false;
  std::string resume;
  std::int64_t resume_step = 0;
  int procs = 0; ///< local processes to start; -1: as many as topology.workers
  gradwire::scheduler::allreduce_bench_options ab;
  std::string ab_min = "1K", ab_max = "64M", ab_chunk = "1M", ab_ring_from = "auto";
};

void add_sample(CLI::App& app, cli_args& a) {
  a.sample = app.add_subcommand("sample", "generate text with a trained GPT (model.kind = \"gpt\")");
  a.sample->footer(R"(Examples:
  gradwire sample results/lm --prompt "The meaning of life" --tokens 200
  gradwire sample results/lm --prompt "Q: " --temperature 0.8 --seed 3)");
  auto& o = a.sampling;
  a.sample->add_option("model", o.model, "model.safetensors, or a results folder holding one")->required();
  a.sample->add_option("--prompt,-p", o.prompt, "text to continue (cropped to its last model.context bytes)")
    ->required();
  a.sample->add_option("--tokens,-n", o.tokens, "bytes to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  a.sample->add_option("--temperature,-t", o.temperature, "0: greedy; else sample from softmax(logits / T)")
    ->capture_default_str()
    ->check(CLI::NonNegativeNumber);
  a.sample->add_option("--seed", o.seed, "seed of the sampling")->capture_default_str();
}

void add_run(CLI::App& app, cli_args& a) {
  a.run = app.add_subcommand("run", "train as a config file says");
  auto* run = a.run;
  run->footer(run_help);
  run->add_option("config", a.config_path, "experiment config (TOML); with --resume, the run's own config.toml");
  run->add_option("--resume", a.resume,
                  "continue the run in this folder from its newest complete checkpoint (train.checkpoint_every; "
                  "Ctrl-C writes one too), in the same folder; or give a checkpoint's folder")
    ->type_name("RUN_DIR");
  run->add_option("--from-step", a.resume_step, "with --resume: that step's checkpoint, not the newest");
  run->add_option("--out,-o", a.out_dir, "results folder (overrides experiment.out)");
  run->add_option("--set,-s", a.overrides, "override a config key: --set train.epochs=1 (repeatable)")
    ->type_name("KEY=VALUE");
  run->add_flag("--quiet,-q", a.quiet, "no progress line");
  run->add_flag("--no-report", a.no_report, "skip report.html and its plots at the end");
  run->add_flag("--force", a.force,
                "replace the results of an earlier run or sweep in the results folder (without it, a folder that "
                "holds one is refused: nothing is overwritten)");
  run->add_option("--sweep", a.sweeps,
                  "run a grid: --sweep topology.workers=1,2,4,8 (repeatable; experiment.seed values are repeats, "
                  "averaged); writes sweep.md, sweep.csv, sweep.json")
    ->type_name("KEY=V1,V2,...");
  run->add_option("--procs,-p", a.run_procs,
                  "start this many local processes, one worker each, or `workers` for as many as topology.workers "
                  "(srun/mpirun need no flag: rank and size come from their environment); with a sweep, every "
                  "point runs across that many processes")
    ->type_name("N|workers");
}

void add_bench(CLI::App& app, cli_args& a) {
  auto* bench = app.add_subcommand("bench", "benchmarks of the runtime itself");
  bench->require_subcommand(1);
  auto& ab = a.ab;
  a.allreduce = bench->add_subcommand("allreduce", "ring allreduce across processes over UCX (as nccl-tests)");
  auto* allreduce = a.allreduce;
  allreduce->footer(allreduce_help);
  allreduce->add_option("-b,--minbytes", a.ab_min, "smallest size (1K)");
  allreduce->add_option("-e,--maxbytes", a.ab_max, "largest size (64M)");
  allreduce->add_option("-f,--stepfactor", ab.factor, "size factor between rows (2)");
  allreduce->add_option("-n,--iters", ab.iters, "timed rounds per size (20)");
  allreduce->add_option("-w,--warmup_iters", ab.warmup, "warm-up rounds per size (5)");
  allreduce->add_option("-c,--chunk", a.ab_chunk, "ring pipelining chunk (1M)");
  allreduce->add_option("--engine", ab.engine, "both (default: the communicator, MPI semantics, then the actors' zero-copy column), comm or actors")
    ->check(CLI::IsMember({"both", "comm", "actors"}));
  allreduce->add_option("--net", ab.job.comm_net, "the communicator's network: auto (its own TCP lanes where UCX would use TCP), ucx or sockets");
  allreduce->add_option("--comm-algo", ab.comm_algo, "the communicator's algorithm: auto (through shared memory when every rank is on this host; hierarchical on several hosts when some hold 2 or more ranks; else recursive doubling below --ring-from, ring from there), rd, ring, rabenseifner, shm or hier")
    ->check(CLI::IsMember({"auto", "rd", "ring", "rabenseifner", "shm", "hier"}));
  allreduce->add_option("--ring-from", a.ab_ring_from, "the communicator's ring from this size up (auto: 64K over shared memory, 256K on TCP lanes, 512K on lanes between 2 ranks)");
  allreduce->add_option("--algo", ab.algo, "the actors' ring, direct (chunks straight to their owners and back) or auto (direct below 16M on more than 2 processes)")
    ->check(CLI::IsMember({"ring", "direct", "auto"}));
  allreduce->add_option("--tls", ab.job.tls, "UCX transports, e.g. posix,cma or tcp (default: UCX_TLS or UCX's choice)");
  allreduce->add_flag("--shm-refs,!--no-shm-refs", ab.job.shm_refs,
                      "on one node, pass chunks as references into the sender's shared memory (default: on)");
  allreduce->add_option("--spin-us", ab.job.spin_us, "busy-poll the link this long after each event (default: 1000 when each rank has a CPU, else 3000 yielding between polls)");
  allreduce->add_flag("--spin-yield", ab.job.spin_yield, "yield the CPU between those polls (default: when ranks share CPUs)");
  ab.job.pin = true;
  allreduce->add_flag("--pin,!--no-pin", ab.job.pin,
                      "pin each rank's progress thread to CPU rank mod CPUs (default; as MPI binds ranks to cores)");
  allreduce->add_option("--rendezvous", ab.job.rendezvous, "HOST:PORT of rank 0 (default: environment)");
  allreduce->add_option("--procs,-p", a.procs, "start this many local processes (otherwise one rank of srun/mpirun)");
}

void add_others(CLI::App& app, cli_args& a) {
  a.report = app.add_subcommand("report", "write report.html (tables and gnuplot plots) for a run or sweep folder");
  a.report->footer(R"(For a run folder (summary.json, metrics.jsonl): loss and test accuracy
against wall time and steps, staleness histograms, the summary and
per-worker tables. For a sweep folder (sweep.json): the comparison table,
accuracy and loss curves of every point overlaid, speedup and efficiency
against workers, staleness per point. Plots need gnuplot (Debian:
gnuplot-nox); without it the page has the tables and says so.
`gradwire run` writes the report itself unless --no-report.

Examples:
  gradwire report results/default
  gradwire report results/study-scaling-sweep)");
  a.report->add_option("dir", a.report_dir, "results folder of a run or a sweep")->required();
  a.eval = app.add_subcommand("eval", "evaluate a trained model (model.safetensors, or a run's folder) on its test set");
  a.eval->footer(R"(The model file carries its run's config: the model is rebuilt from it and
evaluated on that config's test set. --set changes the config first, e.g.
--set data.path=/data/fashion-mnist or --set data.test_subset=1000.

Examples:
  gradwire eval results/default
  gradwire eval results/ring/model.safetensors --set train.threads=2)");
  a.eval->add_option("model", a.eval_path, "model.safetensors, or a results folder holding one")->required();
  a.eval->add_option("--set,-s", a.overrides, "override a config key: --set data.test_subset=1000 (repeatable)")
    ->type_name("KEY=VALUE");
  add_sample(app, a);
  a.keys = app.add_subcommand("keys", "list every config key with its default and meaning");
  a.info = app.add_subcommand("info", "show the build: CUDA support and visible GPUs");
}

/// run --procs N | workers: -1 stands for "as many as topology.workers".
void parse_run_procs(cli_args& a) {
  if (!*a.run || a.run_procs.empty())
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
std::vector<gradwire::scheduler::sweep_axis> sweep_axes(const cli_args& a,
                                                         const std::optional<gradwire::scheduler::run_config>& base,
                                                         int ranks, bool launched_child) {
  if (!a.sweeps.empty() && ranks > 1)
    throw gradwire::error("a sweep is driven by one process: run it without srun/mpirun, with --procs N or "
                          "--procs workers for points across processes");
  std::vector<gradwire::scheduler::sweep_axis> axes;
  for (const auto& s : a.sweeps)
    axes.push_back(gradwire::scheduler::parse_sweep(s));
  if (!base || !axes.empty() || ranks != 1 || launched_child)
    return axes;
  if (!base->sweep_variants.empty()) {
    gradwire::scheduler::sweep_axis v{"variant", {}, {}};
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
void check_single(cli_args& a, const gradwire::scheduler::run_config& base, int ranks, bool launched_child) {
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
  return gradwire::scheduler::launch_local(procs, args, restarts);
}

gradwire::scheduler::run_options run_options_of(const cli_args& a) {
  route_stop_signals();
  std::signal(SIGXFSZ, SIG_IGN); // over a file-size limit: a write error the results writer reports, not a kill
  gradwire::scheduler::run_options o;
  o.progress = !a.quiet;
  o.force = a.force;
  o.stop = &g_stop;
  o.resume = a.resume;
  o.resume_step = a.resume_step;
  return o;
}

/// One experiment in this process (or as one rank of a job).
int run_experiment(const cli_args& a, gradwire::scheduler::run_config cfg) {
  if (!a.out_dir.empty())
    cfg.out = a.out_dir;
  const auto opts = run_options_of(a);
  auto summary = cfg.single() ? gradwire::scheduler::run_single(cfg, opts)
                              : gradwire::scheduler::run_actors(cfg, opts);
  if (summary.contains("rank")) // a rank other than 0 of a multi-process job: rank 0 reports
    return g_stop ? 130 : 0;
  auto acc = summary["final_test_accuracy"];
  std::printf("%s: %s in %.1f s, %.0f samples/s, test accuracy %s, results in %s\n", cfg.name.c_str(),
              summary["status"].get<std::string>().c_str(), summary["wall_seconds"].get<double>(),
              summary["samples_per_sec"].get<double>(),
              acc.is_null() ? "n/a" : fmt::format("{:.2f}%", 100 * acc.get<double>()).c_str(), cfg.out.c_str());
  if (!a.no_report)
    report_on(cfg.out);
  return g_stop ? 130 : 0;
}

/// The subcommands that need no config: bench allreduce, keys, report, info.
std::optional<int> run_tool(cli_args& a) {
  if (*a.allreduce) {
    a.ab.min_bytes = gradwire::scheduler::parse_bytes(a.ab_min, "--minbytes");
    a.ab.max_bytes = gradwire::scheduler::parse_bytes(a.ab_max, "--maxbytes");
    a.ab.chunk_bytes = gradwire::scheduler::parse_bytes(a.ab_chunk, "--chunk");
    a.ab.ring_from_bytes = a.ab_ring_from == "auto" ? 0 : gradwire::scheduler::parse_bytes(a.ab_ring_from, "--ring-from");
    return gradwire::scheduler::bench_allreduce(a.ab);
  }
  if (*a.keys) {
    std::fputs(gradwire::scheduler::describe_keys().c_str(), stdout);
    return 0;
  }
  if (*a.report) {
    report_on(a.report_dir);
    return 0;
  }
  if (*a.eval) {
    const auto e = gradwire::scheduler::evaluate_model_file(a.eval_path, a.overrides);
    const bool text = e.dataset == "text";
    std::printf("%s: test accuracy %.2f%%, test loss %.4f%s (%lld test %s of %s)\n", e.file.c_str(),
                100 * e.accuracy, e.loss, text ? " nats per byte" : "", static_cast<long long>(e.samples),
                text ? "windows" : "images", e.dataset.c_str());
    return 0;
  }
  if (*a.sample) {
    const auto text = gradwire::scheduler::sample_text(a.sampling); // bytes: any of them, NUL too
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  if (*a.info) {
    std::fputs(gradwire::scheduler::build_info().c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

/// The run's config: the file given, or with --resume the run folder's own
/// config.toml (the resolved config it ran with), results in that folder.
gradwire::scheduler::run_config run_config_of(cli_args& a) {
  if (a.resume.empty()) {
    if (a.config_path.empty())
      throw gradwire::error("gradwire run: give a config file (or --resume RUN_DIR)");
    return gradwire::scheduler::load_config(a.config_path, a.overrides);
  }
  namespace fs = std::filesystem;
  fs::path dir(a.resume);
  if (fs::exists(dir / "MANIFEST.json")) // a checkpoint's folder: RUN_DIR/checkpoints/step-N
    dir = dir.parent_path().parent_path();
  if (a.config_path.empty())
    a.config_path = (dir / "config.toml").string();
  if (!a.sweeps.empty())
    throw gradwire::error("--resume continues one run: drop --sweep");
  auto cfg = gradwire::scheduler::load_config(a.config_path, a.overrides);
  // Saved after lost workers: the run goes on with the survivors.
  const int survivors = gradwire::scheduler::checkpoint_workers(a.resume, a.resume_step);
  if (survivors > 0 && survivors != cfg.workers) {
    if (!std::getenv("GRADWIRE_RANK") && gradwire::transport::detect_launch().rank == 0)
      gradwire::log::warn("the checkpoint was saved after the run lost workers: resuming with its {} surviving worker(s), "
        "renumbered 0 to {}, without the config's [[faults]]", survivors, survivors - 1);
    cfg = gradwire::scheduler::load_config_of_survivors(a.config_path, a.overrides, survivors);
  }
  if (a.out_dir.empty())
    a.out_dir = dir.string();
  return cfg;
}

int dispatch(cli_args& a, int argc, char** argv) {
  parse_run_procs(a);
  // The config, read once: the sweep, the launch and the run all use it.
  std::optional<gradwire::scheduler::run_config> base;
  if (*a.run)
    base = run_config_of(a);
  const int ranks = gradwire::transport::detect_launch().size;
  const bool launched_child = std::getenv("GRADWIRE_RANK") != nullptr;
  const auto axes = sweep_axes(a, base, ranks, launched_child);
  if (!axes.empty()) {
    std::vector<std::string> failed;
    auto dir =
      gradwire::scheduler::run_sweep(a.config_path, a.overrides, axes, a.out_dir, run_options_of(a), a.procs, &failed);
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
    gradwire::scheduler::claim_results_folder(a.out_dir.empty() ? base->out : a.out_dir, a.force, "run");
  if (a.procs > 0 && !launched_child)
    return relaunch(a.procs, argc, argv, base ? base->restarts : 0);
  if (auto status = run_tool(a))
    return *status;
  return run_experiment(a, std::move(*base));
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradwire: distributed deep-learning training from actors.\n"
               "Run topology experiments from a config file; see `gradwire run --help`."};
  app.require_subcommand(1);
  app.fallthrough(); // --log-level after the subcommand too
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "messages at this level and above: debug, info, warn, error or off "
                                           "(default info, or GRADWIRE_LOG_LEVEL)")
    ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}));
  cli_args a;
  add_run(app, a);
  add_bench(app, a);
  add_others(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a success; any usage error exits 2, as a config error does
    // (CLI11's own codes, such as 109 for an unknown option, say nothing more).
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (app.count("--log-level") > 0)
    gradwire::log::set_level(*gradwire::log::parse_level(log_level));
  int rc = 0;
  try {
    rc = dispatch(a, argc, argv);
  } catch (const gradwire::error& e) {
    gradwire::log::error("{}", e.what());
    rc = 2;
  } catch (const std::exception& e) {
    gradwire::log::error("internal error: {}", e.what());
    rc = 1;
  }
  if (gradwire::scheduler::actors_abandoned()) { // (its actor system is left running: no exit() through it)
    std::fflush(nullptr);
    std::_Exit(rc == 0 ? 2 : rc);
  }
  return rc;
}
