#pragma once
/// @file topology.hpp
/// Wires a topology of actors in one process and runs it: the same worker,
/// shard and peer actors, connected differently.
///
/// | kind | actors | exchange per step |
/// |---|---|---|
/// | parameter_server | N workers, M shards over even ranges of the parameter buffer | pull slices, push gradient slices (sync, async, SSP, backup workers, DC-ASGD) |
/// | local_sgd | N workers, M averaging shards | parameters averaged every H steps |
/// | diloco | N workers, M averaging shards | every H steps, the average applied by an outer Nesterov step |
/// | ring | N workers, N ring peers | ring allreduce of gradient buckets |
/// | hierarchical | N workers, N peers in groups | ring in each group, ring of group leaders |
/// | gossip | N workers on a graph | D-PSGD neighbour averaging or AD-PSGD pairwise averaging |

#include "actors/gossip_graph.hpp"
#include "actors/messages.hpp"
#include "models/compress.hpp"
#include "actors/snapshot.hpp"
#include "scheduler/runtime/coordinator.hpp"
#include "scheduler/runtime/faults.hpp"
#include "scheduler/runtime/virtual_time.hpp"
#include "actors/topology_options.hpp"
#include "actors/trace.hpp"
#include "actors/update_record.hpp"
#include "actors/worker_core.hpp"
#include "models/dataset.hpp"
#include "models/network.hpp"
#include "models/optimizer.hpp"
#include "models/trainer.hpp"
#include "transport/node.hpp"
#include "transport/ucx_comm.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gradwire::scheduler {

/// A checkpoint to resume from: every actor's part, by who ("worker 2",
/// "shard 0"), all of step `step`.
struct resume_point {
  std::int64_t step = 0;
  std::map<std::string, std::shared_ptr<const actors::snapshot>> parts;
  /// The part of `who`; throws gradwire::error when the checkpoint lacks it.
  std::shared_ptr<const actors::snapshot> part(const std::string& who) const;
};

/// A family of wirings: its row (topology_registry.hpp) says everything
/// that depends on it.
struct topology_family;
/// The parameter server's row (ps_wiring.hpp), the setup's default.
extern const topology_family parameter_server_family;

/// A job as the runtime wires it. The families' own options (ps, ring,
/// gossip) are the base's, whole (actors/topology_options.hpp).
struct topology_setup : actors::family_options {
  /// Never null: run_topology reads the wiring and its rules from the row.
  const topology_family* family = &parameter_server_family;
  models::model_spec spec;
  models::optimizer_spec opt;
  int workers = 2;
  /// Across processes, shard i's rank (topology.ps.shard_placement =
  /// "per-host": each host's first rank); empty: rank 0, or i mod
  /// processes with ps.spread_shards.
  std::vector<int> shard_homes;
  /// Across processes, each rank's host number (transport::host_numbers):
  /// a ring's re-form sends a survivor behind the state of a donor on its
  /// own host where there is one. Empty: hosts unknown.
  std::vector<int> rank_hosts;
  /// compression.kind: the ring's gradient, compressed (mode none: dense).
  models::compress_spec compress;
  /// The parameter shards (topology.ps.shard_placement = "per-host") or the
  /// hierarchical groups (topology.group_size = 0) follow the hosts.
  bool by_host = false;
  /// Ring workers poll for chunks instead of sleeping (worker_config::spin_wait):
  /// see spin_wait_default.
  bool spin_wait = false;
  bool distinct_init = false; ///< every replica from its own seed
  int batch_size = 64;
  /// Per worker (by rank), overriding batch_size, 1.0 and 0 when not empty.
  std::vector<int> worker_batch;
  std::vector<double> worker_slowdown, worker_delay_ms, worker_jitter_ms;
  /// Per-worker learning-rate multipliers ([[nodes]] lr_scale; empty: 1).
  std::vector<double> worker_lr_scale;
  /// Per worker (by rank): its device and threads (empty: cpu, `threads`).
  std::vector<kernels::device> worker_device;
  std::vector<int> worker_threads;
  /// Every worker computes on a second replica (a GPU worker's path) even
  /// on the CPU: for tests.
  bool separate_compute = false;
  std::int64_t steps = 100; ///< per worker
  /// Total samples over all workers, shared out by speed: the coordinator
  /// stops every worker once their samples reach it (each at its next step
  /// boundary), and `steps` only caps each. 0: every worker runs `steps`.
  std::int64_t budget_samples = 0;
  int threads = 1;          ///< per worker
  /// Across processes: this process's node (one worker per process, rank =
  /// node rank; rank 0 also coordinates). Null: every actor in this process.
  std::shared_ptr<transport::node> node;
  /// Across processes, where the ring sums through the job's collective
  /// communicator (topology.ring.allreduce): the communicator, owned by the job.
  transport::ucx_comm* comm = nullptr;
  /// Across processes: called once this process's actors are published
  /// (starts the node and waits for every rank to get there).
  std::function<void()> on_published;
  /// Across processes: waits until every rank calls it with the same epoch
  /// (the job's barrier; epochs 0 and 1 are the scheduler's own).
  std::function<void(int epoch)> sync_ranks;
  models::parallelism how = models::parallelism::automatic;
  std::uint64_t seed = 1;
  models::partition_spec partition; ///< data.partition: iid, or label-skewed shards
  int log_every = 50; ///< steps per worker metrics record
  /// Spans of every actor in this process, for trace.json (null: none).
  std::shared_ptr<actors::tracer> trace;
  /// Worker 0's replica every eval_every steps (0: never), evaluated by
  /// on_eval on the coordinator's thread while the workers go on.
  std::int64_t eval_every = 0;
  std::function<void(std::int64_t, const actors::slice& params, const actors::slice& state)> on_eval;
  /// The run's stop request, for the workers: a step's compute gives it up
  /// between two layers (worker_config::stop). The coordinator reads the
  /// one run_topology is given.
  const std::atomic<bool>* stop = nullptr;
  /// Faults injected from the config (faults.hpp): every strike of the job,
  /// the same in every process. kill, delay, drop and partition need a job
  /// across processes (run_topology refuses them in one).
  std::vector<fault_strike> faults;
  /// This process's link faults (across processes, when `faults` has any;
  /// the job's emulated link applies them).
  std::shared_ptr<transport::link_faults> link_faults;
  /// The longest a worker may stay silent (workers send a heartbeat about
  /// twice a second) before the run fails naming it (train.step_timeout_s).
  std::chrono::milliseconds timeout{60000};
  /// Workers' requests and waits on one another give up after
  /// request_timeout_factor x timeout: when one worker stalls a sync step,
  /// the others' requests must not time out before the coordinator names
  /// the stalled one.
  static constexpr int request_timeout_factor = 2;
  std::chrono::milliseconds request_timeout() const { return request_timeout_factor * timeout; }
  /// A worker's heartbeat interval: a quarter of the silence limit, at most 500 ms.
  std::chrono::milliseconds beat_interval() const {
    return std::min<std::chrono::milliseconds>(std::chrono::milliseconds(500), timeout / 4);
  }
  /// Checkpoints: every `checkpoint_every` steps each actor's part goes to
  /// on_checkpoint (rank 0; coordinator.hpp's checkpoint_plan); 0: none.
  std::int64_t checkpoint_every = 0;
  /// Or by time: every `checkpoint_every_s` seconds the coordinator pauses
  /// the workers at their next boundary and has them all snapshot one step
  /// (a multiple of checkpoint_grid's).
  double checkpoint_every_s = 0;
  std::function<void(std::int64_t step, std::vector<actors::snapshot_frame> parts)> on_checkpoint;
  /// A ring that runs itself (no peers, no sharded update, no balancing,
  /// equal batches) survives lost workers while this many remain; 0: a
  /// lost worker fails the run.
  int min_workers = 0;
  /// Across processes: a lost worker may come back, and an elastic ring
  /// re-forms with it: a rank cut off while alive knocks
  /// (transport.rejoin_s), or a new process replaces a dead one
  /// (train.restarts, at most that many in all).
  bool rejoin = false;
  int restarts = 0;
  /// Rank -> the step before which it is not let back in ([[faults]]
  /// back_at_step; the workers then report every step).
  std::map<int, std::int64_t> back_at_step;
  /// This process replaces a lost worker's (GRADWIRE_REJOIN=1): its worker
  /// waits for the ring to take it in, with a live peer's state.
  bool replacing = false;
  /// Resume: every actor starts from its part of this checkpoint.
  std::shared_ptr<const resume_point> resume;
  /// experiment.record: each async shard writes its record
  /// (actors/update_record.hpp) into this folder, up to record_max_bytes
  /// ("": none).
  std::string record_dir;
  std::int64_t record_max_bytes = 0;
  /// The run's id (experiment.run_id): in each record's header, so that a
  /// replay knows the record's run.
  std::string run_id;
  /// gradwire replay: the shards follow these records (by shard id), and
  /// worker r runs replay->steps[r] steps. Null: a run of its own.
  std::shared_ptr<const actors::replay_cut> replay;
  /// Virtual time (virtual_time.hpp): the run is simulated on this clock,
  /// and `sys` runs its scheduler (configure_virtual). Null: real time.
  std::shared_ptr<simulation> sim;
};

struct topology_outcome {
  /// The trained parameters: the shards' (parameter server), rank 0's
  /// replica (ring: all are equal), or the replicas' mean (gossip).
  std::vector<float> params;
  std::vector<actors::worker_report> reports; ///< by rank
  actors::histogram staleness;                ///< summed over shards
  std::int64_t max_clock_gap = 0;             ///< fastest - slowest worker, largest seen by any shard
  std::vector<std::int64_t> dropped;          ///< backup workers: pushes dropped, by rank
  /// Largest distance of a replica from the replicas' mean, relative to the
  /// mean's norm (0 for parameter servers; ~0 for a ring).
  double replica_spread = 0;
  double seconds = 0;
  bool interrupted = false; ///< stopped early by the stop flag
  bool budget_reached = false; ///< stopped by the shared budget (setup.budget_samples)
  std::vector<int> lost;    ///< across processes: workers whose process failed (async parameter server carried on)
  std::vector<fault_record> faults; ///< every failure the run met and how it went on
};

/// Even ranges of a buffer of `n` floats for `parts` shards (16-aligned edges).
std::vector<std::pair<std::size_t, std::size_t>> shard_ranges(std::size_t n, int parts);
/// Streaming DiLoCo's fragments: `parts` ranges of whole tensors covering
/// the buffer of n floats in order, each near an equal share of it (the
/// padding after a tensor goes with it). Throws when there are fewer
/// tensors than parts.
std::vector<std::pair<std::size_t, std::size_t>> fragment_ranges(const models::param_layout& layout, std::size_t n,
                                                                  int parts);

using actors::gossip_graph; ///< actors/gossip_graph.hpp

/// Runs the topology on `data`; throws gradwire::error naming the rank or
/// shard when a worker fails or does not report within the timeout.
/// `on_progress(steps, samples)` gets the totals over all workers as
/// heartbeats arrive; `on_metrics` each worker's record every log_every steps.
/// When `*stop` becomes true the workers are stopped and the parameters so
/// far are returned with `interrupted` set.
topology_outcome run_topology(
  caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
  const std::function<void(std::int64_t, std::int64_t)>& on_progress = {},
  const std::function<void(const actors::step_metrics&)>& on_metrics = {},
  const std::atomic<bool>* stop = nullptr);

/// Whether ring workers should poll for chunks: when `job_threads` (the
/// worker threads of the whole job) fit this machine's cores; across
/// processes that assumes every rank is here, the cautious side.
/// GRADWIRE_SPIN_WAIT=0|1 overrides.
bool spin_wait_default(int job_threads);

} // namespace gradwire::scheduler
