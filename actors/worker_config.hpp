#pragma once
/// @file worker_config.hpp
/// A worker's configuration: what every worker kind takes, and one struct
/// per family for what only that family reads (as c10d's per-collective
/// options extend a base). Each family struct extends the family's options
/// from the config (topology_options.hpp) with what the wiring adds at
/// spawn: handles, ranges, hooks.

#include "actors/mix_record.hpp"
#include "actors/reduce_protocol.hpp"
#include "actors/shard_protocol.hpp"
#include "actors/snapshot.hpp"
#include "actors/topology_options.hpp"
#include "actors/trace.hpp"
#include "actors/virtual_clock.hpp"
#include "kernels/device.hpp"
#include "kernels/tensor.hpp"
#include "models/batcher.hpp"
#include "models/compress.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/trainer.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::actors {

/// A parameter-server worker's (worker.cpp, streaming_worker.cpp): the
/// server's options, whole (sync or async, SSP bound, push-pull, backup
/// workers, local SGD and DiLoCo), and the shards it talks to.
struct ps_worker_options : ps_options {
  ps_worker_options& operator=(const ps_options& o) {
    static_cast<ps_options&>(*this) = o;
    return *this;
  }
  /// Every shard by index; typed, so each request and reply handler is
  /// checked (shard_protocol.hpp).
  std::vector<shard_actor> handles;
  std::vector<std::pair<std::size_t, std::size_t>> ranges; ///< each shard's [begin, end)
  /// Async, shards spread over ranks, elastic: a shard whose rank is lost
  /// is rebuilt on rank 0; its pushes are dropped and its pulls wait.
  bool may_move = false;
};

/// A ring worker's (ring_worker.cpp, compressed_worker.cpp): the rings'
/// options, whole (chunk size, overlap, speed balancing, the sharded
/// update), and what the wiring gives it.
struct ring_worker_options : ring_options {
  ring_worker_options& operator=(const ring_options& o) {
    static_cast<ring_options&>(*this) = o;
    return *this;
  }
  /// The peer that sums its buckets while it computes (reduce_protocol.hpp).
  /// Null: the worker is its own ring peer (chunks go worker to worker; no
  /// overlap with backward).
  reducer_actor peer;
  std::vector<std::pair<std::size_t, std::size_t>> buckets; ///< as make_buckets gives them
  /// Multiplies this worker's gradient before the sum (batch_i / mean batch,
  /// so that workers of different batch sizes give the sample-weighted mean).
  float grad_weight = 1.f;
  /// Speed balancing (batch_balance.hpp): with balance_every > 0, every
  /// balance_every steps each worker sends its measured speed to every
  /// other (handles from the wiring's (wire_atom, right, all)); two steps
  /// later all move the split of the global batch, the sum of
  /// `balance_batches` (the starting batches by rank), to the same new split.
  std::vector<int> balance_batches;
  /// sharded_update: a worker that runs its own flat ring (no peer actor)
  /// updates only the chunks it owns after the reduce-scatter and
  /// all-gathers parameters instead of gradients: each replica does 1/N of
  /// the optimizer work (ZeRO-1 style sharding of the update; the same
  /// model, bit for bit).
  /// With the sharded update in one process: the replicas' one weight
  /// buffer (undefined: a buffer of its own). Each owner writes only its
  /// chunks, after every worker has handed over that round's gradient and
  /// before any can start the next, so the all-gather passes views of it
  /// and no replica copies the others' chunks in (saves a copy of
  /// (N-1)/N of the weights per step and worker).
  kernels::tensor shared_params;
  /// A flat ring that runs itself (no peer actor) survives a lost worker:
  /// on (abandon_atom, generation) it abandons the round in flight; on
  /// (rewire_atom, generation, survivors, right) it takes a live
  /// peer's state if it is a step behind, and goes on as a ring of the
  /// survivors with its data re-sharded among them.
  bool elastic = false;
  /// Who runs an elastic ring's re-form: the ring worker's abandoned
  /// reply, its donor state and (held at wait_at) its paused notice go
  /// here. Null: the coordinator (report_to). Virtual time sets its
  /// reformer (scheduler/runtime/virtual_reform.hpp), so that the
  /// protocol's messages cross the modelled network at their virtual times.
  caf::actor reform_to;
};

/// A gossip worker's (gossip_worker.cpp): gossip's options, whole (D-PSGD
/// or AD-PSGD, the graph, compressed gossip), and its neighbours.
struct gossip_worker_options : gossip_options {
  gossip_worker_options& operator=(const gossip_options& o) {
    static_cast<gossip_options&>(*this) = o;
    return *this;
  }
  std::vector<caf::actor> neighbours; ///< every worker by rank (self too), from (wire_atom, handles)
  std::vector<int> links;             ///< ranks of this worker's neighbours in the graph
  /// D-PSGD mixing weights: one per neighbour in `links` order, then this
  /// worker's own (Metropolis-Hastings, so the mixing matrix is doubly stochastic).
  std::vector<float> mix_weights;
  /// Gossip that survives a lost worker: every worker's neighbours (the
  /// whole graph), for the weights among the survivors; empty: none.
  std::vector<std::vector<int>> whole_graph;
  /// Each replica starts from its own seed (seed + rank) instead of one
  /// shared initialisation (studies of consensus from different starts).
  bool distinct_init = false;
  /// AD-PSGD with experiment.record: the file its store's events go to
  /// (mix_record.hpp; "": none), and its bound in bytes (0: none).
  std::string record_path;
  std::int64_t record_max_bytes = 0;
  std::string record_run; ///< the run's id, in the record's header
  /// gradwire replay of AD-PSGD: its store's events as the run took them
  /// (the store's gate follows them); null: a run of its own.
  std::shared_ptr<const mix_record> replay;
};

/// The runtime's fault injection (scheduler/runtime/faults.hpp), as hooks
/// the worker calls; each empty function: nothing.
struct fault_hooks {
  /// After each finished step, with the steps done so far.
  std::function<void(std::int64_t steps)> after_step;
  /// Inside each step's computation, after its gradients and before the
  /// emulated slowdown (mid_step faults).
  std::function<void()> in_step;
  /// Virtual time's kill faults: non-empty once a kill struck this worker
  /// (what struck it); it then ends at its step boundary, as its process
  /// would.
  std::function<std::string()> killed;
  /// Slow faults in virtual time: a factor over `slowdown` for the step
  /// being computed now.
  std::function<double()> slowdown_now;
  /// nan faults: true once for the step whose gradient is to be NaN.
  std::function<bool()> take_nan;
  /// Slow faults in real time: how long `work` seconds of computing, begun
  /// `begun_ago` seconds ago, take under the slow spell: its factor holds
  /// until the spell ends, full speed after.
  std::function<double(double work, double begun_ago)> slow_spell;
};

/// What every worker kind takes.
struct worker_config {
  int rank = 0, world = 1;
  models::model_spec spec;
  int threads = 1;
  /// Where the forward and backward passes run. The replica the actors
  /// exchange (params, gradients, optimizer) stays on the host; a worker on
  /// a GPU keeps a second replica there: parameters go up before each
  /// batch, gradients (and BatchNorm statistics) come down after it.
  kernels::device device = kernels::device::cpu();
  /// Use that second replica even on the CPU (what a GPU worker does, for
  /// tests on machines without one).
  bool separate_compute = false;
  models::parallelism how = models::parallelism::automatic;
  int batch_size = 64;
  /// Emulated slower node: after computing a batch in t seconds the worker
  /// waits (slowdown - 1) * t more (1 = full speed), then delay_ms plus a
  /// uniform random 0 .. jitter_ms.
  double slowdown = 1.0;
  double delay_ms = 0, jitter_ms = 0;
  std::int64_t steps = 0; ///< full batches to run (epochs wrap around)
  /// Tell report_to of every step (step_atom), not only each heartbeat: a
  /// shared budget is counted by the coordinator.
  bool step_progress = false;
  /// A replacement process's worker: on wire it waits for the ring's
  /// re-form to take it in (with a live peer's state) instead of starting.
  bool joining = false;
  std::uint64_t seed = 1;
  models::partition_spec partition; ///< how the workers' shards split the data (models::shard_indices)
  models::optimizer_spec opt;
  const models::dataset* data = nullptr; ///< shared, read-only
  int log_every = 50;     ///< steps per (metrics_atom, step_metrics) record
  /// The run's stop request (Ctrl-C, SIGTERM): a step's compute gives it up
  /// between two layers and the worker holds at the step before
  /// (worker_core::compute), so a stop need not wait out a long step. Not
  /// for a worker that hands buckets over as backward goes (ring overlap),
  /// one on a device replica, or one in virtual time. Null: never.
  const std::atomic<bool>* stop = nullptr;
  /// Rank 0 only: every eval_every steps (before the last) it sends a
  /// snapshot of its replica as (eval_atom, step, slice) to report_to.
  std::int64_t eval_every = 0;
  caf::actor report_to;   ///< receives (step_atom, rank, steps, samples) about twice a second and (done_atom, worker_report)
  /// How long a request to a shard, a peer or a mixer may go unanswered,
  /// and a round or balancing wait may last, before the worker fails:
  /// topology_setup::request_timeout(), twice the coordinator's silence
  /// limit (train.step_timeout_s), so that a step one stalled worker holds
  /// up is reported by the coordinator, naming that worker, before its
  /// peers' requests expire.
  std::chrono::milliseconds request_timeout{120000};
  /// Between two heartbeats to the coordinator (topology_setup::beat_interval()):
  /// well under its silence limit, so that only a worker stuck inside a
  /// computation falls silent.
  std::chrono::milliseconds beat_interval{500};
  /// Spans for trace.json (track "worker <rank>"; a ring worker without a
  /// peer adds "ring <rank>"); null: no tracing.
  std::shared_ptr<tracer> trace;

  /// A ring worker running the ring itself (a neighbour's chunk) and a
  /// parameter-server worker (the shards' replies) wait by polling the
  /// mailbox (kernels/poll_wait.hpp: busy, then yielding, then giving up)
  /// instead of sleeping on CAF's condition variable. Only when the worker threads
  /// of this process fit its cores, or a poller would take a core from a
  /// computing worker.
  bool spin_wait = false;
  /// Called in that polling loop: across processes, moves the transport on
  /// from the waiting worker's own thread (transport::node::poll), so that
  /// frames for it are handled without waking the receive thread (one
  /// thread per process on the critical path, as MPI's progress does).
  std::function<bool()> idle_poll;
  /// Checkpoints: every checkpoint_every steps (before the last) the worker
  /// sends its snapshot (snapshot_atom) to report_to; 0: never.
  std::int64_t checkpoint_every = 0;
  /// Resume: the worker starts from this snapshot (its step, replica,
  /// optimizer state and data position) instead of from step 0.
  std::shared_ptr<const snapshot> resume;
  /// compression.kind: what this worker's exchange compresses, and how
  /// (a ring worker with a mode other than none is a compressing worker:
  /// spawn_compressed_worker).
  models::compress_spec compress;

  /// Virtual time (virtual_clock.hpp): the worker reads this clock, is
  /// charged the compute model's time for each batch (no emulated
  /// slowdown sleeps) and is spawned event-based on the simulation's
  /// scheduler instead of on a thread of its own. Null: real time.
  std::shared_ptr<virtual_clock> vclock;

  // Each family's own: only its workers read them.
  ps_worker_options ps;         ///< parameter server, local SGD, DiLoCo
  ring_worker_options ring;     ///< ring and hierarchical allreduce
  gossip_worker_options gossip; ///< D-PSGD, AD-PSGD
  fault_hooks faults;
};


} // namespace gradwire::actors
