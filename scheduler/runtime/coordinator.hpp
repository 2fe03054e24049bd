#pragma once
/// @file coordinator.hpp
/// The coordinator of an in-process run: the scheduler's own actor, which
/// collects every worker's heartbeats, metrics and final report, fails the
/// run when a worker stays silent too long (naming its rank and last step),
/// and on a stop request asks every worker to finish at its next step
/// boundary, so the parameters so far are kept.

#include "actors/messages.hpp"
#include "actors/shard_protocol.hpp"
#include "actors/snapshot.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gradwire::scheduler {

/// A failure the run met: which worker, what, when (seconds since the
/// coordinator started), and how it went on.
struct fault_record {
  int rank = 0;
  std::string kind = "lost";  ///< "lost": its process failed or it fell silent
  std::string what;
  double detected_at = 0;
  double recovered_at = -1;   ///< the survivors went on (-1: they did not)
  std::int64_t at_step = 0;   ///< the step the survivors went on from
  std::int64_t steps_lost = 0; ///< steps of work abandoned (a round in flight)
  int workers_after = 0;
  double rejoined_at = -1;       ///< it came back (its process alive after a stall or partition; -1: not)
  std::int64_t rejoined_step = -1; ///< the step the ring re-formed with it at
  /// The coordinator's start on the steady clock (the times above count from it).
  std::chrono::steady_clock::time_point origin{};
};

/// Jobs that survive a lost worker: lock-step rings that re-form
/// (ring_worker_options::elastic), and parameter servers whose shards and
/// workers go on with the survivors.
struct elastic_plan {
  bool on = false;
  /// Parameter servers and gossip: each loss is told to these shards and
  /// to the surviving workers as (reform_atom, generation, survivors); the
  /// shards complete versions with the survivors' pushes, gossip
  /// neighbours re-weigh, the workers share out the data. No round is
  /// abandoned (false: a ring, re-formed).
  bool tell_survivors = false;
  /// A ring: a lost worker whose process asks to come back ((knock_atom,
  /// rank) to the coordinator) is let back in by this (every rank hears it
  /// again), and the ring re-forms with it, its state from a live peer.
  /// Empty: no one comes back.
  std::function<void(int rank)> readmit;
  /// Rank -> the step before which it is not let back in ([[faults]]
  /// back_at_step); a rank's entry is used once.
  std::map<int, std::int64_t> back_at_step;
  std::vector<actors::shard_actor> shards;
  /// An async parameter server whose shards are spread over ranks: whether
  /// a lost rank held shards, and their rebuild on rank 0 from a survivor's
  /// replica (`params`, the whole buffer) at `version`, with the workers'
  /// clocks and live flags; returns (shard index, new shard) for each.
  /// Null: a lost rank's shards end the run.
  std::function<bool(int rank)> holds_shards;
  std::function<std::vector<std::pair<int, actors::shard_actor>>(int rank, const std::vector<float>& params,
                                                        std::int64_t version, const std::vector<std::int64_t>& clocks,
                                                        const std::vector<bool>& live)>
    rebuild_shards;
  std::vector<int> host_of; ///< a ring: each rank's host (a survivor behind takes a donor's state there); empty: unknown
  int min_workers = 1; ///< fewer survivors than this: the run fails
  std::string why_not; ///< when off: why this run cannot go on without a worker (for the error)
};

struct coordination {
  std::vector<fault_record> faults;
  std::vector<actors::worker_report> reports; ///< by rank
  bool interrupted = false;
  bool budget_reached = false; ///< stopped because the shared budget was spent
  std::string failure; ///< the first failure, empty when none
  std::vector<int> lost; ///< workers whose process failed while the run carried on
};

/// Checkpoints during a run. Every worker sends its part of step K
/// (snapshot_atom) after that step; once every worker's part is in, each
/// shard is asked for its part at version shard_version(K) (a lock-step
/// shard keeps that one; -1: as it is now, an async shard), and the whole
/// goes to on_checkpoint on the coordinator's thread, which should only
/// hand it over (persisting is the caller's, in the background).
struct checkpoint_plan {
  std::int64_t every = 0; ///< steps; 0: no checkpoints
  /// By time: this many seconds after the last, the workers pause at their
  /// next boundary (one round trip to the coordinator), all snapshot the
  /// largest of those boundaries rounded up to a multiple of `align`, and
  /// go on. 0: none.
  double every_seconds = 0;
  std::int64_t align = 1;
  std::vector<actors::shard_actor> shards;
  std::function<std::int64_t(std::int64_t step)> shard_version;
  std::function<void(std::int64_t step, std::vector<actors::snapshot_frame> parts)> on_checkpoint;
};

/// How a run is coordinated (coordinate()).
struct coordinator_options {
  /// A worker silent this long (no step) fails the run, naming it; with
  /// `carry_on` it is cut off instead: `cut_off` (across processes: the
  /// node treats its live but idle process as failed, which comes back as
  /// a lost worker), or in one process, lost at once.
  std::chrono::milliseconds timeout{60000};
  /// The steps and samples of all workers so far, as heartbeats arrive.
  std::function<void(std::int64_t, std::int64_t)> on_progress;
  /// Each worker's record every log_every steps.
  std::function<void(const actors::step_metrics&)> on_metrics;
  /// Set true: every worker is stopped (with a checkpoint where planned).
  const std::atomic<bool>* stop = nullptr;
  /// A worker whose process failed (lost_atom) is carried on without (an
  /// async parameter server, which waits for no one) and listed in
  /// `lost`; false: the run fails naming it.
  bool carry_on = false;
  /// Virtual time: a loss is dated by the lost worker's own (virtual)
  /// clock, not this thread's.
  bool virtual_time = false;
  /// Worker 0's snapshots (eval_atom), run on the coordinator's thread.
  std::function<void(std::int64_t, const actors::slice&, const actors::slice&)> on_eval;
  std::function<void(int rank, const std::string& why)> cut_off;
  /// A worker's final report without an error is in (across processes:
  /// its process may leave now, and the node does not report it lost).
  std::function<void(int rank)> on_finished;
  /// > 0: once the workers' samples add up to it, every worker is told to
  /// finish at its next step (workers send step_atom each step:
  /// worker_config::step_progress).
  std::int64_t budget_samples = 0;
  checkpoint_plan checkpoints;
  elastic_plan elastic;
};

/// How long a stop waits for the workers to reach a common step before it
/// stops them without a checkpoint, and at most how long it waits for
/// their reports after telling them to stop.
inline constexpr std::chrono::seconds stop_pause_bound{10};

/// Waits for the reports of `workers` (indexed by rank), which send theirs
/// to `self`. On failure the workers are not stopped: the caller stops
/// every actor of its topology.
coordination coordinate(caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                        const coordinator_options& options);

/// Sends an exit to each actor (all of them local) and waits until every
/// one has terminated: nothing they read may be freed before. An actor
/// still inside a handler stop_limit() on (a hung kernel, a stalled
/// thread) is given up: said so, and actors_abandoned() is true from then on.
void stop_actors(caf::scoped_actor& self, const std::vector<caf::actor>& actors);

/// How long stop_actors waits for an actor inside a handler: `wait`
/// (train.stop_wait_s, 60 s by default), or twice the step timeout where
/// that is longer (a run whose steps may take minutes must be let finish
/// one). Set from each run's config.
void set_stop_limit(std::chrono::milliseconds step_timeout,
                    std::chrono::milliseconds wait = std::chrono::milliseconds(60000));
std::chrono::milliseconds stop_limit();

/// Some actor of this process never ended when told to (stop_actors). The
/// process must then leave without destroying its actor system, whose
/// destructor waits for that actor for ever: the run's results are
/// written first, then the process ends with std::_Exit (main does).
bool actors_abandoned();

/// Stops the actors spawned in a scope (stop_actors) when an exception
/// leaves it: a wiring that throws (a failed check, a transport error) must
/// leave no actor running, or the actor system's destructor waits for it
/// for ever, a hang in place of the error. (Virtual time's actors end with
/// the simulation: hold none of them here.)
class stop_on_throw {
public:
  explicit stop_on_throw(caf::actor_system& sys) : sys_(sys), entered_(std::uncaught_exceptions()) {}
  stop_on_throw(const stop_on_throw&) = delete;
  stop_on_throw& operator=(const stop_on_throw&) = delete;
  ~stop_on_throw();
  void add(const caf::actor& a) {
    if (a)
      actors_.push_back(a);
  }
  void add(const std::vector<caf::actor>& as) {
    for (const auto& a : as)
      add(a);
  }

private:
  caf::actor_system& sys_;
  int entered_;
  std::vector<caf::actor> actors_;
};

} // namespace gradwire::scheduler
