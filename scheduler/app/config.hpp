#pragma once
/// @file config.hpp
/// The experiment config: a TOML file checked against config_schema(), with
/// `--set key=value` overrides, resolved into typed settings. Every error
/// names the file, line and key (or the --set argument) and, for an unknown
/// key or value, the nearest valid one.

#include "actors/topology_options.hpp"
#include "models/compress.hpp"
#include "models/network.hpp"
#include "models/optimizer.hpp"
#include "scheduler/runtime/faults.hpp"
#include "scheduler/runtime/topology_registry.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace gradwire::scheduler {

/// A [[nodes]] group: `count` workers alike.
struct node_group {
  std::string name;
  int count = 1;
  double slowdown = 1.0;
  int batch_size = 0; ///< 0: train.batch_size
  double delay_ms = 0, jitter_ms = 0;
  std::string device; ///< "" = train.device
  int threads = 0;    ///< 0 = train.threads
  double lr_scale = 1.0; ///< multiplies the learning rate of the group's updates
  double step_ms = 0;    ///< virtual time: the group's step time (0: virtual.step_ms)
  std::string where;  ///< "file:line: [[nodes]] #i", for messages
};

/// experiment.clock = "virtual" and [virtual]: the run simulated on a
/// virtual clock (scheduler/runtime/virtual_time.hpp); links between hosts
/// take transport.latency_us and transport.bandwidth_gbps.
struct virtual_config {
  bool on = false;
  double step_ms = 0; ///< 0: measured on this machine for the model and batch (cached)
  std::string distribution = "constant"; ///< constant | lognormal | straggler
  double cv = 0.3, straggler_p = 0.1, straggler_k = 4;
  std::string replay; ///< a real run's metrics.jsonl: its workers' step times, replayed
  int hosts = 1, workers_per_host = 1; ///< resolved (default: one host): hosts x workers_per_host >= topology.workers
  /// virtual.host_workers: workers on each host, consecutive ranks (hosts
  /// of different sizes); empty: workers_per_host on every host.
  std::vector<int> host_workers;
  /// virtual.host_bandwidth_gbps: each host's NIC in Gb/s (empty: transport.bandwidth_gbps).
  std::vector<double> host_gbps;
  /// Each worker's host, by rank (empty: rank / workers_per_host).
  std::vector<int> host_of() const {
    std::vector<int> out;
    for (std::size_t h = 0; h < host_workers.size(); ++h)
      out.insert(out.end(), static_cast<std::size_t>(host_workers[h]), static_cast<int>(h));
    return out;
  }
  double intra_latency_us = 0, intra_bandwidth_gbps = 0;
  bool nic = true;
  int cores_per_host = 0; ///< handlers a host runs at once (0: no limit)
  int threads = 0;        ///< the simulation's compute threads (0: the machine's cores)
  double latency_cv = 0;   ///< each message's latency lognormal with this cv (0: exact)
  double apply_gbps = 0;   ///< a shard applies gradients at this many GB/s (0: instantly)
  double copy_gbps = 0;    ///< a sender copies a message's tensors in at this many GB/s (0: free)
  double restart_s = 2;    ///< train.restarts: a killed worker's new process asks back in after this
};

/// A run as its config gives it. The families' options (ps, ring, gossip)
/// are the base's, read into the structs that reach the actors whole
/// (actors/topology_options.hpp). Keys of another kind keep their
/// defaults: ps.local_steps is 0 unless topology.kind is local-sgd,
/// ps.staleness_bound -1 unless topology.ps.mode is ssp.
struct run_config : actors::family_options {
  std::string source; ///< file the config came from (for messages)
  std::set<std::string> overridden; ///< the keys --set gave
  /// Where `key`'s value came from, for messages: "--set key" or "FILE: key".
  std::string origin(const std::string& key) const {
    return overridden.count(key) ? "--set " + key : source + ": " + key;
  }

  std::string name = "default";
  std::uint64_t seed = 1;
  std::string out; ///< results folder
  std::string run_id; ///< experiment.run_id: set as the run starts (set_run_id); kept by a resume
  bool tensorboard = false; ///< experiment.tensorboard: tb/ beside metrics.jsonl

  models::model_spec model;

  std::string dataset = "fashion-mnist";
  std::string data_path;
  std::string if_missing = "error"; ///< "error" | "synthetic"
  std::int64_t train_subset = 0, test_subset = 0;
  std::int64_t synthetic_train = 10000, synthetic_test = 2000;
  bool normalize = true;
  double val_fraction = 0.1; ///< text: the held-out tail of the bytes
  models::partition_spec partition; ///< data.partition, data.dirichlet_alpha, data.classes_per_worker

  int epochs = 5;
  std::int64_t max_steps = 0;
  bool shared_budget = false; ///< train.budget = "shared"
  std::string eval_mode = "auto"; ///< train.eval
  int batch_size = 64;
  models::optimizer_spec opt; ///< its schedule is filled in by optimizer_for
  std::string lr_schedule = "constant";
  double lr_step_epochs = 0, lr_step_factor = 0.1, warmup_epochs = 0, momentum_warmup_epochs = 0;
  std::int64_t warmup_steps = 0; ///< instead of warmup_epochs
  int lr_base_batch = 0;
  double target_accuracy = 0;
  int threads = 1;
  std::string parallelism = "auto";
  std::string device = "cpu";
  std::string device_where; ///< where train.device was set ("file:line: train.device"), for messages
  std::string precision = "fp32"; ///< train.precision: what the GEMMs and attention compute in
  std::string precision_where;
  std::string topology = "single"; ///< topology.kind as written
  /// Its row in the topology registry; null: "single" (one worker, no actors).
  const topology_family* family = nullptr;
  bool single() const { return family == nullptr; }
  std::string mode = "sync"; ///< topology.ps.mode as written: sync | async | ssp
  int workers = 2;
  /// topology.ps.shard_placement = "per-host": one shard on each host's first
  /// rank; ps.shards is set from the hosts once they are known.
  bool shards_per_host = false;
  bool same_init = true;
  std::string transport_tls;  ///< "" = UCX_TLS or UCX's choice
  models::compress_spec compress; ///< [compression]: the ring's gradient, compressed
  int spin_us = 0;
  int progress_nice = -1; ///< the link's progress thread (-1: 19 where the workers poll, else 0)
  bool shm_refs = true; ///< across processes on one node: ring chunks by reference into shared memory
  int peer_timeout_ms = 5000;
  int restarts = 0; ///< train.restarts: worker processes that may be replaced
  double rejoin_s = 0; ///< a cut-off rank asks to be let back in for this long (0: it leaves)
  double latency_us = 0, bandwidth_gbps = 0; ///< link emulation across processes
  std::vector<node_group> nodes; ///< empty: all workers alike
  virtual_config virt;           ///< experiment.clock, [virtual]
  std::vector<fault_spec> faults; ///< [[faults]], in file order
  std::int64_t step_timeout_ms = 60000; ///< a worker silent this long (no step) is cut off
  std::int64_t stop_wait_ms = 60000;    ///< a computation told to stop is given up this long on
  int log_every = 50;
  int eval_every = 1;
  std::int64_t eval_steps = 0; ///< also evaluate every N steps (0: epochs only)
  std::int64_t checkpoint_every = 0; ///< steps per worker between checkpoints (0: none)
  double checkpoint_every_s = 0;      ///< or seconds between checkpoints (0: none)
  int keep_checkpoints = 2;
  int min_workers = 1; ///< a ring that loses workers goes on while this many remain (0: a loss ends the run)
  bool trace = true;        ///< write trace.json
  int trace_spans = 20000;  ///< per actor track (ring buffer)
  bool record = true;       ///< experiment.record: async shards write record/ (update_record.hpp)
  std::int64_t record_max_mb = 256;

  /// The fully resolved config (defaults filled in) as TOML text, written
  /// to the results folder so a run can be repeated exactly.
  std::string resolved_toml;
  /// [sweep]: the grid for `gradwire run` (key, values as TOML text), in file order.
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  /// [sweep.variants]: label -> overrides ("key=value") that go together
  /// (e.g. a topology kind with its mode), one axis of the grid, in file order.
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep_variants;
  /// [sweep] paired = true: each variant after the first is also replayed
  /// on the first's schedule (config_sweep.hpp).
  bool sweep_paired = false;
};

/// Parses the file at `path` and applies `overrides` ("key=value").
run_config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// A run's config to resume from a checkpoint saved after it lost workers:
/// `workers` of them (the survivors, renumbered), and without its
/// [[faults]] (they name ranks of the run as it was).
run_config load_config_of_survivors(const std::string& path, const std::vector<std::string>& overrides, int workers);
/// Why this run's ring must sum through the ring of actors rather than the
/// collective communicator (topology.ring.allreduce): a ring that re-forms
/// without a lost worker, a rank let back in, or faults injected into the
/// links' messages. Empty: the communicator may serve it.
std::string actors_ring_needed(const run_config& c);

/// Same, from text; `source` names it in messages.
run_config parse_config(const std::string& text, const std::string& source,
                        const std::vector<std::string>& overrides = {});

/// The key table as text, for `gradwire keys`.
std::string describe_keys();

/// The optimizer a run applies: cfg.opt with the learning rate scaled by
/// the linear scaling rule (lr_base_batch, for `global_batch`) and the
/// schedule in steps per worker (`steps_per_epoch`, `total_steps`).
models::optimizer_spec optimizer_for(const run_config& cfg, std::int64_t steps_per_epoch, std::int64_t total_steps,
                                     int global_batch);

} // namespace gradwire::scheduler
