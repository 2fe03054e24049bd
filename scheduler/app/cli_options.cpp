// The command line's subcommands, options and help texts.
#include "scheduler/app/cli_options.hpp"

#include "scheduler/app/version.hpp"

#include <CLI/CLI.hpp>

namespace gradwire::scheduler {
namespace {

/// The subcommands' objects, alive as long as the CLI::App that owns them.
struct subcommands {
  CLI::App *run = nullptr, *allreduce = nullptr, *report = nullptr, *keys = nullptr, *eval = nullptr;
  CLI::App *info = nullptr, *sample = nullptr, *export_ = nullptr, *compare = nullptr, *replay = nullptr;
  CLI::App* batches = nullptr;
};

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

void add_sample(CLI::App& app, cli_args& a, subcommands& s) {
  s.sample = app.add_subcommand("sample", "generate text with a trained GPT (model.kind = \"gpt\")");
  s.sample->footer(R"(Examples:
  gradwire sample results/lm --prompt "The meaning of life" --tokens 200
  gradwire sample results/lm --prompt "Q: " --temperature 0 (greedy: the likeliest byte each time)
  gradwire sample results/lm --prompt "Q: " --temperature 1.0 --top-k 0 --seed 3)");
  auto& o = a.sampling;
  s.sample->add_option("model", o.model, "model.safetensors, or a results folder holding one")->required();
  s.sample->add_option("--prompt,-p", o.prompt, "text to continue (cropped to its last model.context bytes)")
    ->required();
  s.sample->add_option("--tokens,-n", o.tokens, "bytes to generate")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  s.sample->add_option("--temperature,-t", o.temperature,
                       "sample from softmax(logits / T) (nanoGPT's default); 0: greedy")
    ->capture_default_str()
    ->check(CLI::NonNegativeNumber);
  s.sample->add_option("--top-k,-k", o.top_k, "sample among the k likeliest bytes (nanoGPT's 200); 0: all")
    ->capture_default_str()
    ->check(CLI::NonNegativeNumber);
  s.sample->add_option("--seed", o.seed, "seed of the sampling")->capture_default_str();
}

void add_run(CLI::App& app, cli_args& a, subcommands& s) {
  s.run = app.add_subcommand("run", "train as a config file says");
  auto* run = s.run;
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

void add_bench(CLI::App& app, cli_args& a, subcommands& s) {
  auto* bench = app.add_subcommand("bench", "benchmarks of the runtime itself");
  bench->require_subcommand(1);
  auto& ab = a.ab;
  s.allreduce = bench->add_subcommand("allreduce", "ring allreduce across processes over UCX (as nccl-tests)");
  auto* allreduce = s.allreduce;
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
  allreduce->add_option("--peer-timeout-ms", ab.job.live.peer_timeout_ms,
                         "a rank silent this long is reported failed and the benchmark aborts (5000, as transport.peer_timeout_ms)")
      ->check(CLI::Range(100, 3600000));
  allreduce->add_option("--rendezvous", ab.job.rendezvous, "HOST:PORT of rank 0 (default: environment)");
  allreduce->add_option("--procs,-p", a.procs, "start this many local processes (otherwise one rank of srun/mpirun)");
}

void add_export_compare(CLI::App& app, cli_args& a, subcommands& s) {
  s.export_ = app.add_subcommand("export", "write a finished run's (or every point of a sweep's) results in another format");
  s.export_->footer(R"(--tensorboard: tb/ in the run's folder (each point's, for a sweep), from
its metrics.jsonl: eval/test_accuracy, eval/test_loss and train/lr in tb/,
each worker's loss, staleness (mean, p99), samples/s, time split and MB
sent and received in tb/worker-N. experiment.tensorboard = true writes
the same as a run goes.

Examples:
  gradwire export --tensorboard results/default
  tensorboard --logdir results/default/tb)");
  s.export_->add_option("dir", a.export_dir, "results folder of a run or a sweep")->required();
  s.export_->add_flag("--tensorboard", a.export_tensorboard, "TensorBoard event files")->required();
  s.compare = app.add_subcommand("compare", "put runs side by side: curves overlaid, staleness, differing config keys");
  s.compare->footer(R"(Any runs' folders, from any sweep or day: one report.html with their
curves overlaid, their staleness histograms together, a table of their
figures and one of the config keys whose values differ.

Examples:
  gradwire compare results/ps-async results/ring --out results/async-vs-ring)");
  s.compare->add_option("runs", a.compare_runs, "two or more run folders")->required()->expected(2, -1);
  s.compare->add_option("--out,-o", a.compare_out, "folder of the page (default results/compare); never a run's folder");
  s.compare->add_flag("--force", a.force, "replace an earlier comparison in that folder");
}

void add_batches(CLI::App& app, cli_args& a, subcommands& s) {
  s.batches = app.add_subcommand("batches", "print the training samples each worker takes at each step, without training");
  s.batches->footer(R"(The run's own order: the same partition, shuffles and skipped partial
batches, drawn from the config's seed. One JSON line per worker and step,
{"worker": 0, "step": 1, "samples": [...]}, the indices into the training
set as the run loads it. Feed them to another system (PyTorch DDP, a
plain loop) to train it on gradwire's batches. Speed balancing and lost or
joining workers move the batches while a run trains: the order holds
until they first move (a warning says so).

Examples:
  gradwire batches examples/ring.toml --steps 50 > batches.jsonl
  gradwire batches examples/ring.toml --set topology.workers=4 --steps 10)");
  s.batches->add_option("config", a.config_path, "the run's config file")->required();
  s.batches->add_option("--steps,-n", a.batch_steps, "steps per worker (default: the run's own)")
    ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  s.batches->add_option("--set,-s", a.overrides, "override a config key (repeatable)")->type_name("KEY=VALUE");
}

void add_replay(CLI::App& app, cli_args& a, subcommands& s) {
  s.replay = app.add_subcommand("replay", "run a recorded run again in this process: the same bits, or a variant on "
                                          "the same schedule (--set)");
  s.replay->footer(R"(An async parameter server's shards record the order of their updates
(experiment.record, on by default: record/ in the results folder). A
replay runs the run's config.toml in this process, at full speed, each
shard taking the updates in the recorded order: model.safetensors comes
out the same bits as the run's, however many processes and slow nodes it
had. With --set, the algorithm changes and the schedule stays: every
update arrives in the recorded order at its recorded staleness, so two
variants differ by the algorithm alone. A killed run's record is
followed to its last whole update. Lock-step runs need no record.

Examples:
  gradwire replay results/ps-async
  gradwire replay results/ps-async --set topology.ps.staleness_lr=true --out results/ps-async-slr)");
  s.replay->add_option("run", a.replay_dir, "results folder of the recorded run")->required();
  s.replay->add_option("--out,-o", a.out_dir, "results folder of the replay (default: RUN-replay)");
  s.replay->add_option("--set,-s", a.overrides, "change a config key, keeping the schedule (repeatable)")
    ->type_name("KEY=VALUE");
  s.replay->add_flag("--quiet,-q", a.quiet, "no progress line");
  s.replay->add_flag("--no-report", a.no_report, "skip report.html and its plots at the end");
  s.replay->add_flag("--force", a.force, "replace the results of an earlier run in the replay's folder");
}

void add_others(CLI::App& app, cli_args& a, subcommands& s) {
  s.report = app.add_subcommand("report", "write report.html (tables and gnuplot plots) for a run or sweep folder");
  s.report->footer(R"(For a run folder (summary.json, metrics.jsonl): loss and test accuracy
against wall time and steps, staleness histograms, the summary and
per-worker tables. For a sweep folder (sweep.json): the comparison table,
accuracy and loss curves of every point overlaid, speedup and efficiency
against workers, staleness per point. Plots need gnuplot (Debian:
gnuplot-nox); without it the page has the tables and says so.
`gradwire run` writes the report itself unless --no-report.

Examples:
  gradwire report results/default
  gradwire report results/study-scaling-sweep)");
  s.report->add_option("dir", a.report_dir, "results folder of a run or a sweep")->required();
  s.eval = app.add_subcommand("eval", "evaluate a trained model (model.safetensors, or a run's folder) on its test set");
  s.eval->footer(R"(The model file carries its run's config: the model is rebuilt from it and
evaluated on that config's test set. --set changes the config first, e.g.
--set data.path=/data/fashion-mnist or --set data.test_subset=1000.

Examples:
  gradwire eval results/default
  gradwire eval results/ring/model.safetensors --set train.threads=2)");
  s.eval->add_option("model", a.eval_path, "model.safetensors, or a results folder holding one")->required();
  s.eval->add_option("--set,-s", a.overrides, "override a config key: --set data.test_subset=1000 (repeatable)")
    ->type_name("KEY=VALUE");
  add_sample(app, a, s);
  add_replay(app, a, s);
  add_export_compare(app, a, s);
  add_batches(app, a, s);
  s.keys = app.add_subcommand("keys", "list every config key with its default and meaning");
  s.info = app.add_subcommand("info", "show the build: CUDA support and visible GPUs");
}

/// Adds every subcommand and its options to `app`, bound to `a`.
void add_commands(CLI::App& app, cli_args& a, subcommands& s) {
  add_run(app, a, s);
  add_bench(app, a, s);
  add_others(app, a, s);
}

} // namespace

std::optional<int> parse_command_line(int argc, char** argv, cli_args& a, std::string* usage_error) {
  CLI::App app{"gradwire: distributed deep-learning training from actors.\n"
               "Run topology experiments from a config file; see `gradwire run --help`."};
  app.require_subcommand(1);
  app.fallthrough(); // --log-level after the subcommand too
  app.set_version_flag("--version", version_line());
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "messages at this level and above: debug, info, warn, error or off "
                                           "(default info, or GRADWIRE_LOG_LEVEL)")
    ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}));
  subcommands s;
  add_commands(app, a, s);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are a success; any usage error exits 2, as a
    // config error does (CLI11's own codes say nothing more).
    if (usage_error != nullptr && e.get_exit_code() != 0)
      *usage_error = e.what();
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (app.count("--log-level") > 0)
    a.log_level = log_level;
  // The subcommand given, by the name cli.cpp asks for (`bench allreduce` as "allreduce").
  for (const auto* sub : {s.run, s.allreduce, s.report, s.keys, s.eval, s.info, s.sample, s.export_, s.compare, s.replay,
                          s.batches})
    if (*sub)
      a.command = sub->get_name();
  return std::nullopt;
}

} // namespace gradwire::scheduler
