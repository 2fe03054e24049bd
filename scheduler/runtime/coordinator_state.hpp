/// @file coordinator_state.hpp
/// The coordinator's state through one run (coordinator.cpp's loop); its
/// elastic part (a lost worker, a ring's re-form, a worker back) is in
/// coordinator_elastic.cpp. Internal to scheduler/runtime.
#pragma once

#include "scheduler/runtime/checkpoint_gather.hpp"
#include "actors/worker_protocol.hpp"
#include "scheduler/runtime/coordinator.hpp"
#include "kernels/stop_aware.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace gradwire::scheduler::detail {

using clock_type = std::chrono::steady_clock;

/// Who was heard from when: a worker silent for longer than the timeout
/// (train.step_timeout_s) is lost, or fails the run.
struct liveness {
  liveness(std::size_t n, std::chrono::milliseconds t) : timeout(t), last_seen(n, clock_type::now()), heard(n, false) {}
  std::chrono::milliseconds timeout;
  std::vector<clock_type::time_point> last_seen;
  std::vector<bool> heard; ///< a step or a metrics window has come from this rank
  void saw(std::size_t r) {
    last_seen[r] = clock_type::now();
    heard[r] = true;
  }
  /// This thread was busy elsewhere (shards asked, an evaluation): no
  /// worker's silence counts for that time.
  void excuse_all() {
    for (auto& t : last_seen)
      t = std::max(t, clock_type::now() - std::chrono::milliseconds(50));
  }
  /// Unheard for longer than the timeout while this process ran (a stop of
  /// the whole job is no worker's silence).
  bool silent(std::size_t r) const { return kernels::waited_longer(last_seen[r], timeout); }
};

/// The run's end: a stop asked for, and a stop that keeps a checkpoint
/// (the workers' boundaries as they answer paused_atom, then the step all
/// run to).
struct stop_state {
  bool requested = false;
  clock_type::time_point sent;
  clock_type::time_point seen = kernels::last_stop_end(); ///< the end of this process's last stop, as last seen
  bool pausing = false;
  std::vector<std::int64_t> boundary;
  std::int64_t final_step = -1;
};

/// An elastic ring's re-form in flight, and lost workers coming back.
struct reform_state {
  int generation = 0;
  std::vector<std::int64_t> survivors;
  std::map<int, std::pair<std::int64_t, bool>> replies; ///< rank -> (steps, abandoned a round)
  std::int64_t step = -1; ///< the step all go on from
  std::set<int> adopting; ///< survivors behind, until each has taken a donor's state
  /// A lost worker whose process asks to come back (a stall or partition
  /// that outlasted the liveness bound): let back in, then a ring re-form
  /// with it, where it is the one behind and takes a live peer's state.
  int joining = -1;
  std::vector<int> joins; ///< asked while a re-form was in flight
  std::vector<int> held; ///< asked before their [[faults]] back_at_step
  /// back_at_step reached: the survivors have re-formed (paused) and the
  /// ring waits for this worker, up to park_bound(), before it goes on.
  int awaiting = -1;
  clock_type::time_point parked_since{};
  bool waited = false; ///< this re-form is the wait for `awaiting` (no loss)
  std::map<int, std::int64_t> back_at; ///< elastic_plan::back_at_step, each used once
};

/// Lost ranks whose shards wait to be rebuilt on rank 0 (an async
/// parameter server with spread shards), from worker `from`'s replica.
struct rebuild_state {
  std::vector<int> ranks;
  int from = -1;
};

/// The coordinator's state through one run: who finished, the reports so
/// far, and each concern's own state above. A message naming a rank that is not
/// a worker of this run is ignored (a bad peer cannot index past them).
struct coordinator_state {
  using progress_fn = std::function<void(std::int64_t, std::int64_t)>;
  using metrics_fn = std::function<void(const actors::step_metrics&)>;
  using eval_fn = std::function<void(std::int64_t, const actors::slice&, const actors::slice&)>;

  coordinator_state(std::size_t worker_count, std::chrono::milliseconds t, const progress_fn& p, const metrics_fn& m,
                    const eval_fn& e, bool carry)
      : timeout(t), on_progress(p), on_metrics(m), on_eval(e), carry_on(carry), n(worker_count), live(n, t),
        steps(n, 0), samples(n, 0), finished(n, false) {
    out.reports.resize(n);
  }

  std::chrono::milliseconds timeout;
  const progress_fn& on_progress;
  const metrics_fn& on_metrics;
  const eval_fn& on_eval;
  bool carry_on;
  bool virtual_time = false; ///< coordinator_options::virtual_time
  std::function<void(int, const std::string&)> cut_off;
  std::function<void(int)> on_finished; ///< coordinator_options::on_finished
  clock_type::time_point t0 = clock_type::now();
  std::size_t n;
  coordination out;
  liveness live;
  std::vector<std::int64_t> steps, samples;
  std::vector<bool> finished;
  std::size_t done = 0;
  stop_state stop;
  reform_state reform;
  rebuild_state rebuild;

  bool known(int rank) const { return rank >= 0 && static_cast<std::size_t>(rank) < n; }

  std::int64_t total_samples = 0;

  /// Checkpoints being collected: step -> parts by worker rank.
  const checkpoint_plan* plan = nullptr;

  void on_paused(caf::scoped_actor& me, const std::vector<caf::actor>& all, int rank, std::int64_t at) {
    if (gather->pausing() && known(rank)) { // a checkpoint by time
      gather->boundary(rank, at);
      gather->release(me, all, finished, false);
      return;
    }
    if (!stop.pausing || !known(rank) || stop.final_step >= 0)
      return;
    stop.boundary[static_cast<std::size_t>(rank)] = at;
    std::int64_t last = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (!finished[r] && stop.boundary[r] < 0)
        return;
      last = std::max(last, stop.boundary[r]);
    }
    stop.final_step = last;
    for (std::size_t r = 0; r < n; ++r)
      if (!finished[r])
        me->send(actors::as_worker(all[r]), actors::run_to_atom::value, last);
    stop.pausing = false; // from here as any stop: the workers finish within the stop's bound
    stop.sent = clock_type::now();
  }
  /// The checkpoints' parts, gathered (and the pauses of checkpoints by time).
  std::optional<checkpoint_gather> gather;

  bool lost(std::size_t r) const {
    return std::find(out.lost.begin(), out.lost.end(), static_cast<int>(r)) != out.lost.end();
  }

  /// Asking the shards for their parts kept this thread from hearing the workers.
  void heard_all() { live.excuse_all(); }

  void on_snapshot(caf::scoped_actor& me, const std::string& meta, const actors::slice& floats) {
    if (gather->on_part(me, meta, floats, stop.final_step, [this](std::size_t r) { return lost(r); }))
      heard_all();
  }

  void complete_pending(caf::scoped_actor& me) {
    if (gather->complete_pending(me, stop.final_step, [this](std::size_t r) { return lost(r); }))
      heard_all();
  }

  void totals() {
    std::int64_t a = 0, b = 0;
    for (std::size_t r = 0; r < n; ++r) {
      a += steps[r];
      b += samples[r];
    }
    total_samples = b;
    if (on_progress)
      on_progress(a, b);
  }

  void on_done(actors::worker_report rep) {
    if (!known(rep.rank) || finished[static_cast<std::size_t>(rep.rank)])
      return;
    const auto r = static_cast<std::size_t>(rep.rank);
    // One failed worker stalls the others: stop at once (not when stopping,
    // where a neighbour that has gone is expected).
    if (!rep.error.empty() && !stop.requested)
      out.failure = rep.error;
    if (r < carried.size())
      rep.samples += carried[r];
    steps[r] = rep.steps;
    samples[r] = rep.samples;
    finished[r] = true;
    ++done;
    if (on_finished && rep.error.empty())
      on_finished(rep.rank);
    out.reports[r] = std::move(rep);
    totals();
  }

  // Elastic rings: the survivors re-form without a lost worker.
  const elastic_plan* elastic = nullptr;
  const std::vector<caf::actor>* workers = nullptr;
  caf::scoped_actor* self = nullptr;

  double now_s() const { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

  /// Asks every survivor to abandon its round and say how far it got.
  void start_reform();

  void on_reform_reply(int rank, std::int64_t at, bool abandoned);

  /// A survivor behind has taken a donor's state; once all have, the new ring.
  void on_adopted(int rank, int of_generation);

  void rewire();

  std::chrono::milliseconds park_bound() const {
    return std::min<std::chrono::milliseconds>(timeout / 2, std::chrono::seconds(30));
  }
  /// Every survivor has said how far it got: the step to go on from, who
  /// gives its state to whom, then the new ring.
  void decide_reform();
  std::vector<std::int64_t> carried; ///< by rank: samples of processes since replaced
  /// A lost rank held shards: a survivor's replica is asked for.
  void ask_rebuild(int rank);
  /// That replica: the shards rebuilt on rank 0, every worker told. False: not it.
  bool on_rebuild_state(const std::string& meta, const actors::slice& floats);
  /// The furthest step a worker still in the run has reported.
  std::int64_t furthest_step() const;
  /// back_at_step reached with its worker lost: the ring re-forms and waits
  /// for it (parked); parked too long: goes on without it.
  void take_held();

  void on_rejoin(int rank);
  /// Virtual time, where the ring's re-form runs in the simulation
  /// (virtual_reform.hpp): the ring went on without `rank` from step `at`
  /// at virtual second `at_s`, with `after` workers.
  void on_reformed(int rank, std::int64_t at, bool lost_round, double at_s, int after);
  /// Virtual time: `rank`'s replacement is back in the ring from step `at`.
  void on_rejoined(int rank, std::int64_t at, double at_s);

  void take_next_join();
  /// `rank` is in the run again (everywhere heard, no longer lost), the one joining.
  void readmit_worker(int rank);

  /// A parameter server without a lost worker: the shards and the
  /// survivors hear of it; nothing is redone.
  void go_on_without();

  /// A worker whose process failed.
  void on_lost(actors::worker_report rep);
  /// An elastic job's loss: recorded, and the survivors go on (told, or a
  /// re-formed ring).
  void lose_elastic(actors::worker_report rep);
  /// A job that carries on without the lost worker (async parameter server).
  void lose_and_carry_on(actors::worker_report rep);
  /// Worker r counts as done and lost, its report `rep` with its progress.
  void mark_lost(std::size_t r, actors::worker_report rep, double seconds);

  void on_step(int rank, std::int64_t step, std::int64_t sample_count) {
    if (!known(rank))
      return;
    const auto r = static_cast<std::size_t>(rank);
    live.saw(r);
    steps[r] = step;
    samples[r] = sample_count;
    totals();
    take_held();
  }

  void on_eval_snapshot(std::int64_t step, const actors::slice& params, const actors::slice& state) {
    if (on_eval && !stop.requested)
      on_eval(step, params, state);
    live.excuse_all(); // evaluating kept this thread from hearing the workers
  }

  void on_window(const actors::step_metrics& m) {
    if (!known(m.rank))
      return;
    live.saw(static_cast<std::size_t>(m.rank));
    if (on_metrics)
      on_metrics(m);
  }

  /// Worker r, not finished, unheard for longer than the timeout.
  bool silent(std::size_t r) const { return !finished[r] && live.silent(r); }
  bool any_silent() const {
    for (std::size_t r = 0; r < n; ++r)
      if (silent(r))
        return true;
    return false;
  }

  void check_silence() {
    for (std::size_t r = 0; r < n && out.failure.empty() && !stop.requested; ++r) {
      if (!silent(r))
        continue;
      const auto why = "worker rank " + std::to_string(r) + " silent for " + std::to_string(timeout.count()) +
                       " ms (" +
                       (live.heard[r] ? "last heard at step " + std::to_string(steps[r])
                                 : std::string("nothing heard from it since the run began")) +
                       "; train.step_timeout_s)";
      if (!carry_on && !(elastic != nullptr && elastic->on)) {
        out.failure = why;
        continue;
      }
      live.last_seen[r] = clock_type::now(); // asked once per timeout
      if (cut_off && r != 0) { // its loss comes back as a lost report (worker 0 shares rank 0's process: no cutting)
        cut_off(static_cast<int>(r), why);
        continue;
      }
      actors::worker_report rep;
      rep.rank = static_cast<int>(r);
      rep.error = why;
      on_lost(std::move(rep));
    }
  }

  /// What has not reported is described by its last heartbeat.
  void fill_missing() {
    for (std::size_t r = 0; r < n; ++r)
      if (!finished[r]) {
        out.reports[r].rank = static_cast<int>(r);
        out.reports[r].steps = steps[r];
        out.reports[r].samples = samples[r];
        out.reports[r].seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
      }
  }
};

} // namespace gradwire::scheduler::detail
