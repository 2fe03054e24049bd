#pragma once
/// @file worker_core.hpp
/// What every kind of worker shares: its configuration, its model replica,
/// trainer and data shard, the timing of compute and communication, the
/// per-window metrics record, heartbeats and the final report. The
/// parameter-server worker (worker.cpp), the ring worker (ring_worker.cpp)
/// and the gossip worker (gossip_worker.cpp) differ only in how they
/// exchange gradients or parameters between steps.

#include "actors/messages.hpp"
#include "actors/mix_record.hpp"
#include "actors/refuse.hpp"
#include "actors/request_watch.hpp"
#include "actors/worker_config.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/snapshot.hpp"
#include "actors/topology_options.hpp"
#include "actors/trace.hpp"
#include "actors/virtual_clock.hpp"
#include "kernels/poll_wait.hpp"
#include "models/batcher.hpp"
#include "models/compress.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/network.hpp"
#include "models/recent_mean.hpp"
#include "models/trainer.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace gradwire::actors {

/// The replica, its data and its accounting.
struct worker_core {
  using clock_type = std::chrono::steady_clock;

  worker_config cfg;
  std::unique_ptr<models::model> model;
  std::unique_ptr<models::trainer> trainer;
  std::unique_ptr<models::model> compute_model;     ///< on cfg.device, when separate
  std::unique_ptr<models::trainer> compute_trainer;
  std::unique_ptr<models::batcher> batches;
  models::batch bt;
  std::int64_t step = 0;
  /// Virtual time: the batch the compute model's step time is for (the
  /// configured one); a batch of another size (speed balancing) takes
  /// proportionally longer or shorter.
  int model_batch = 0;
  worker_report report;
  clock_type::time_point start, phase;
  std::int64_t skipped_steps = 0; ///< steps train.on_nonfinite = "skip" dropped
  models::recent_mean last_epoch_loss; ///< over the last epoch's worth of steps: the report's last_loss
  double compute_at_step_start = 0; ///< report.compute_seconds when this step began
  step_metrics window; ///< accumulating towards the next metrics record
  double window_loss = 0, window_staleness = 0;
  std::int64_t window_p99() const; ///< the 99th percentile of this window's staleness
  std::int64_t window_samples = 0, window_pushes = 0;
  double window_error = 0;              ///< compression errors of the window's compressed steps, summed
  std::int64_t window_compressed = 0;   ///< and how many
  std::mt19937_64 jitter_rng;
  trace_ref tr; ///< "worker <rank>": compute, exchange, wait, apply
  std::function<void()> after_compute; ///< compute_offloaded's `then`, until computed()
  models::step_result offloaded;       ///< the offloaded batch's result
  std::string offload_error;           ///< and its error, if it threw
  /// Offloading (virtual time): parameters pulled into the replica at an
  /// offset, copied in by the next offloaded batch on its own thread, or by
  /// land_params() before anything else reads the replica. The replica
  /// holds them either way: they are no state of their own.
  mutable std::vector<std::pair<std::size_t, slice>> incoming;
  void land_params() const;

  /// With cfg.spin_wait, waits for the next message by polling `self`'s
  /// mailbox (kernels::poll_until: busy, then yielding, up to ~2 ms) and,
  /// across processes, moving the transport on (cfg.idle_poll), instead of
  /// returning to CAF, whose detached thread would sleep on a condition
  /// variable (a wake-up on both sides per message).
  template <typename Self>
  void await_mail(Self* self) const {
    if (!cfg.spin_wait)
      return;
    const auto& idle_poll = cfg.idle_poll;
    kernels::poll_until([self, &idle_poll] {
      if (idle_poll)
        idle_poll();
      return !self->mailbox().empty();
    });
  }
  /// Keeps the configuration (so finish() can report), then builds the
  /// replica and data shard; throws on failure.
  void init(worker_config c);
  /// init's first part: the configuration, the clock, trace and jitter.
  void keep_config(worker_config c);
  /// init's second part: the replica, its trainer and data shard (and a
  /// checkpoint's state). It touches nothing but this worker's own state
  /// and reads the shared data: virtual time may offload it.
  void build();
  /// Puts the replica, optimizer, data position and counts where `s` says
  /// (init does, from cfg.resume); throws when it does not fit.
  void restore(const snapshot& s);
  /// Takes a live peer's replica, BatchNorm statistics, optimizer state and
  /// step (a survivor a step behind, when a ring re-forms); its own data
  /// position and counts stay.
  void adopt(const snapshot& s);
  /// A live peer's state for a survivor behind or a worker back in the
  /// ring: adopt, and the donor's epoch.
  void adopt_donor(const snapshot& s);
  /// Re-shards the data: this worker is `pos` of `world` from here on.
  void reshard(int pos, int world, int generation);
  /// A reform (the workers still in the job, by rank): this worker
  /// re-shards the data to its place among them, once per generation
  /// (`seen`: the last one taken). False when the reform is an old one or
  /// leaves this worker out.
  bool reshard_among(int& seen, int generation, const std::vector<std::int64_t>& survivors);
  /// Runs one batch: gradients into trainer->gradients() (`ready` as in
  /// trainer::compute_gradients), then the emulated slowdown. Counts the
  /// time since `phase` as communication first. Throws when the shard has
  /// no full batch. False when a stop request (cfg.stop) came between two
  /// layers: the step is abandoned as if never begun (the replica and
  /// optimizer untouched, BatchNorm's statistics and the batch put back)
  /// and the worker holds at its step, for the stop's pause to find it
  /// there; the caller returns.
  [[nodiscard]] bool compute(caf::event_based_actor* self, const std::function<void(std::size_t)>& ready = {});
  /// "diverged at step N: ..." for a step whose loss or gradient was not finite.
  std::string diverged(const models::nonfinite& e) const;
  /// compute() itself, its nonfinite not yet named by worker and step.
  models::step_result compute_step(const std::function<void(std::size_t)>& ready);
  /// Whether compute_offloaded() is this worker's way to compute: in
  /// virtual time, on its own replica.
  static bool offloads(const worker_config& c) { return c.vclock != nullptr && c.device.is_cpu() && !c.separate_compute; }
  bool offloads() const { return offloads(cfg); }
  /// compute() in virtual time, for the simulation's threads: takes the
  /// batch and the compute model's time here, and hands the gradient (then
  /// `also`, on the same thread) to the simulation (virtual_clock::offload).
  /// The worker then gets (computed_atom), and computed() runs `then`.
  /// Throws as compute() does.
  void compute_offloaded(std::function<void()> then, std::function<void()> also = {});
  /// Virtual time: `work` on the simulation's threads, then `then` on
  /// (computed_atom); an exception from `work` finishes the worker instead.
  void offload(std::function<void()> work, std::function<void()> then);
  /// (computed_atom): runs what follows the offloaded work, or finishes the
  /// worker with its error.
  void computed(caf::event_based_actor* self);
  /// The next full batch into `bt`; throws when the shard has none.
  void next_batch();
  /// Counts a computed batch's loss and samples.
  void count_loss(const models::step_result& r);
  /// Ends the compute phase begun at `t0`: the fault hook, then the
  /// compute model's time (virtual; `real_seconds` for its statistics) or
  /// the emulated slowdown's sleep, then the phase's accounting and span.
  void take_time(clock_type::time_point t0, double real_seconds);
  /// Weights this worker's later gradients by cfg.grad_weight (in the
  /// backward pass of whichever trainer computes them).
  void apply_grad_weight();
  /// The worker's clock: the machine's, or the simulation's (cfg.vclock).
  clock_type::time_point now() const { return now_on(cfg.vclock.get()); }
  double since(clock_type::time_point t) const { return std::chrono::duration<double>(now() - t).count(); }
  /// The seconds this worker ran since `t`: since(t) less a stop of the
  /// process meanwhile (kernels::ran; the simulation's clock in virtual
  /// time). For the measurements a worker acts on: a step stopped halfway
  /// through is no slower to compute.
  double ran_since(clock_type::time_point t) const;
  /// Starts timing a communication phase.
  void begin_comm() { phase = now(); }
  /// Ends it: the time since begin_comm() counts as communication.
  void end_comm();
  /// Counts compute done outside compute() since `t0` (an optimizer step
  /// after an allreduce; traced as "apply").
  void add_compute(clock_type::time_point t0);
  /// Counts `seconds` of the communication phase just ended as compute
  /// instead (optimizer work done inside the exchange).
  void comm_to_compute(double seconds);
  /// Adds time spent waiting for others (part of the communication time);
  /// `span`: it ended now, so trace it as "wait".
  void add_wait(double seconds, bool span = true);
  /// Records one applied push's staleness.
  void add_staleness(std::int64_t s);
  /// Records one step's compression error (compression.kind; the pieces
  /// of a step compressed apart summed into one).
  void add_compression(const models::compress_energy& e);
  /// The kind's own state in its snapshot (e.g. a balanced ring's split,
  /// a compressing worker's residual: float sections follow the moments).
  std::function<void(snapshot&)> save_extra;
  /// Sends this worker's part of a checkpoint at its current step to
  /// report_to: replica, BatchNorm statistics, optimizer moments, step,
  /// data position, counts, and save_extra's.
  void send_snapshot(caf::event_based_actor* self) const { send_snapshot(self, cfg.report_to); }
  /// `donor`: as (donor_atom, ...), the state a ring worker behind adopts;
  /// else as (snapshot_atom, ...), a checkpoint's part.
  /// What a snapshot is for: a checkpoint's part (snapshot_atom), a donor's
  /// state for a ring worker behind (donor_atom), or the replica lost
  /// shards are rebuilt from (replica_state_atom).
  enum class snapshot_for { checkpoint, donor, replica };
  void send_snapshot(caf::event_based_actor* self, const caf::actor& to,
                     snapshot_for what = snapshot_for::checkpoint) const;
  /// Who runs a ring's re-form (ring_worker_options::reform_to, or report_to).
  const caf::actor& reformer() const { return cfg.ring.reform_to ? cfg.ring.reform_to : cfg.report_to; }
  /// A stop that keeps a checkpoint (the coordinator's pause protocol):
  /// on (pause_atom) the worker finishes at most the step it is in, holds
  /// there and tells report_to that boundary (paused_atom); on
  /// (run_to_atom, S) every
  /// worker runs to step S (the largest boundary), sends its snapshot of S
  /// and finishes. So a lock-step topology stops with every replica at one
  /// step, and none waits for a neighbour that holds.
  std::int64_t hold_at = -1;
  /// The steps still to snapshot (after pauses): a checkpoint by time's
  /// step, or a stop's final one. Every one is kept until reached: a
  /// second checkpoint by time can be set before the worker reaches the
  /// first (a slow worker, or one held at a boundary short of it).
  std::set<std::int64_t> snapshot_steps;
  bool held = false;             ///< a step was not begun: resume with tick_atom
  /// compute() gives up a step at cfg.stop (until on_run_to: a stop's last
  /// steps run whole, as every worker must reach the same one).
  bool abortable = false;
  /// compute() ran this step's batch: its share (pushes, chunks, the
  /// parameters to mix) is out, and the step must end where peers wait for
  /// it; until then a stop's pause holds the worker at `step` (on_pause).
  bool contributed = false;
  kernels::tensor state_before; ///< abortable: BatchNorm's statistics as the step began
  /// build(): compute() gives up a step at cfg.stop where it can (see worker_config::stop).
  void arm_stop();
  /// From here every step runs whole (on_run_to).
  void disarm_stop();
  /// compute() at a stop between two layers: the step as never begun, held
  /// at `step` (or ended there, when the stop's last step is reached).
  void abandon_step(caf::event_based_actor* self);
  /// A stop is under way that compute() gives steps up for.
  bool stopping() const { return abortable && cfg.stop->load(std::memory_order_relaxed); }
  /// [[faults]] back_at_step: an elastic ring holds at this step for a lost
  /// worker coming back (-1: none), so that it re-forms exactly there; the
  /// re-form that follows clears it.
  std::int64_t wait_at = -1;
  void on_pause(caf::event_based_actor* self);
  void on_run_to(caf::event_based_actor* self, std::int64_t last);
  /// Checkpoints by time: after a pause, (snapshot_at_atom, S) has every
  /// worker snapshot step S on its way and go on (S < 0: no snapshot).
  void on_snapshot_at(caf::event_based_actor* self, std::int64_t at);
  /// At the start of a step: true (and held) when the worker must hold
  /// here, or (virtual time) a kill struck it and it has ended.
  bool hold(caf::event_based_actor* self);
  /// A kill in virtual time: the worker ends as its process would, without
  /// a report of its own; the coordinator hears of it as a lost worker.
  void die(caf::event_based_actor* self, const std::string& why);
  /// Counts a finished step; every log_every steps sends the window's record.
  void end_step(caf::event_based_actor* self);
  /// Sends heartbeats from a timer (beat_atom must reach on_beat).
  void start_heartbeats(caf::event_based_actor* self);
  /// A heartbeat: gives up the requests overdue, then tells report_to how
  /// far this worker is. False if a request given up ended the worker.
  bool on_beat(caf::event_based_actor* self);
  /// Sends the report (with the final parameters when `with_params`) and quits.
  void finish(caf::event_based_actor* self, std::string error = {}, bool with_params = false);
  bool finished = false; ///< finish() was called
  /// The replies this worker waits for (parameter-server shards, gossip
  /// mixers): given up after cfg.request_timeout of this process's running time.
  request_watch requests;
  /// The timeout for CAF's request(): none in real time (`requests` keeps it).
  caf::duration request_timeout() const { return request_watch::timeout(cfg.request_timeout, cfg.vclock != nullptr); }
  /// A wait begun at `since` has outlasted cfg.request_timeout: on the
  /// simulation's clock, or while this process ran (kernels::waited: a
  /// stop of the whole job is no peer's silence).
  bool overdue(clock_type::time_point since) const;
  /// "worker 3: " for messages.
  std::string who() const { return "worker " + std::to_string(cfg.rank) + ": "; }
};

double seconds_since(std::chrono::steady_clock::time_point t);

/// A host copy of `t` the receiver may keep (empty when `t` is).
slice copy_of(const kernels::tensor& t);

/// A worker kind's start: it refuses (and logs) messages none of its
/// handlers takes, builds its core from `cfg`, then its own state
/// (`init_kind`). False when either throws: the worker has reported the
/// error, with its rank, and quit.
template <class Actor, class InitKind>
bool start_worker(Actor* self, worker_config cfg, InitKind init_kind) {
  auto& st = self->state;
  refuse_unexpected(self, "worker " + std::to_string(cfg.rank));
  try {
    st.init(std::move(cfg)); // first: a failure below is reported with the rank, to the coordinator
    init_kind();
  } catch (const std::exception& e) {
    st.finish(self, st.who() + e.what());
    return false;
  }
  return true;
}

/// start_worker for a worker that offloads (worker_core::offloads): its
/// replica and data shard build on the simulation's threads, and what it
/// is sent meanwhile waits for them. `init_kind` runs first and may read
/// only the configuration. A build or `init_kind` that throws finishes the
/// worker (the build reports it).
template <class Actor, class InitKind>
void start_worker_offloaded(Actor* self, worker_config cfg, InitKind init_kind) {
  auto& st = self->state;
  refuse_unexpected(self, "worker " + std::to_string(cfg.rank));
  st.keep_config(std::move(cfg));
  std::string failed;
  try {
    init_kind();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  st.offload(
    [&st, failed] {
      if (!failed.empty())
        throw gradwire::error(failed);
      st.build();
    },
    [] {});
}

/// A worker's behavior: the control messages every worker kind handles
/// alike (the coordinator's stop, pause, run_to and snapshot_at, its own
/// tick, virtual time's computed), then the kind's own handlers, checked
/// against the kind's protocol `Handle` (worker_protocol.hpp). `stop()`
/// and `tick()` are the kind's own (finish with or without the replica;
/// begin the next step).
template <class Handle, class Actor, class Stop, class Tick, class... Own>
caf::behavior behavior_with_controls(Actor* self, Stop stop, Tick tick, Own... own) {
  return checked_behavior<Handle>(
    [=](tick_atom) { tick(); },
    [=](stop_atom) { stop(); },
    [=](pause_atom) { self->state.on_pause(self); },
    [=](run_to_atom, std::int64_t last) { self->state.on_run_to(self, last); },
    [=](snapshot_at_atom, std::int64_t at) { self->state.on_snapshot_at(self, at); },
    [=](computed_atom) { self->state.computed(self); },
    std::move(own)...);
}

} // namespace gradwire::actors
