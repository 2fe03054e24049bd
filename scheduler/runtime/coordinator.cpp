#include "scheduler/runtime/coordinator.hpp"
#include "actors/worker_protocol.hpp"
#include "kernels/log.hpp"

#include "scheduler/runtime/coordinator_state.hpp"

#include "kernels/stop_aware.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <optional>

namespace gradwire::scheduler {

namespace {
std::atomic<bool> abandoned{false};
std::atomic<std::int64_t> limit_ms{60000};
} // namespace

void set_stop_limit(std::chrono::milliseconds step_timeout, std::chrono::milliseconds wait) {
  limit_ms = std::max<std::int64_t>(wait.count(), 2 * step_timeout.count());
}

std::chrono::milliseconds stop_limit() { return std::chrono::milliseconds(limit_ms.load()); }

bool actors_abandoned() { return abandoned.load(); }

void stop_actors(caf::scoped_actor& self, const std::vector<caf::actor>& actors) {
  // Join: an actor may be inside a handler (a step reading the dataset, a
  // slice of the model) when the exit arrives; the wiring's caller frees
  // those as soon as this returns, so no actor may outlive the call.
  std::size_t left = 0;
  for (const auto& a : actors)
    if (a) {
      self->monitor(a);
      self->send_exit(a, caf::exit_reason::user_shutdown);
      ++left;
    }
  // (Once one actor is given up the process is ending: the stuck one, told
  // again by a later call, is not waited for a second minute.)
  const auto told = std::chrono::steady_clock::now();
  const auto limit = abandoned ? std::chrono::milliseconds(2000) : stop_limit();
  while (left > 0) {
    bool late = false;
    self->receive([&](caf::down_msg&) { --left; },
                  caf::after(std::chrono::milliseconds(500)) >> [&] { late = kernels::waited_longer(told, limit); });
    if (late) { // a handler that never returns (a hung kernel): say so rather than hang the process
      if (!abandoned.exchange(true))
        log::warn("{} actor(s) still running {:g} s after they were told to stop (a computation that never returns); "
          "this process ends once its results are written", left, static_cast<double>(limit.count()) / 1000.0);
      return;
    }
  }
}

stop_on_throw::~stop_on_throw() {
  if (std::uncaught_exceptions() <= entered_ || actors_.empty())
    return;
  try {
    caf::scoped_actor self{sys_};
    stop_actors(self, actors_);
  } catch (...) { // (unwinding already: the first error is the one to tell)
  }
}

using detail::clock_type;
using detail::coordinator_state;

namespace {

/// Tells every worker to finish at its next step boundary and report.
void stop_all(caf::scoped_actor& self, const std::vector<caf::actor>& workers) {
  for (const auto& w : workers)
    self->send(actors::as_worker(w), actors::stop_atom::value);
}

/// The job was told to stop: with checkpoints, every worker holds at its
/// next boundary, then all run to the last of those, snapshot it and
/// report; without, each finishes at its next boundary.
void begin_stop(coordinator_state& st, caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                const coordinator_options& o) {
  st.gather->cancel(); // the stop's own pause takes over
  st.out.interrupted = st.stop.requested = true;
  st.stop.sent = clock_type::now();
  if (!o.checkpoints.on_checkpoint) {
    stop_all(self, workers);
    return;
  }
  st.stop.pausing = true;
  st.stop.boundary.assign(st.n, -1);
  for (std::size_t r = 0; r < st.n; ++r)
    if (!st.finished[r])
      self->send(actors::as_worker(workers[r]), actors::pause_atom::value);
}

/// Checkpoints by time, a stop, a pause given up, a budget spent: what the
/// coordinator starts before it reads its mailbox. False once the workers
/// were told to stop long enough ago that waiting longer is pointless.
bool drive(coordinator_state& st, caf::scoped_actor& self, const std::vector<caf::actor>& workers,
           const coordinator_options& o) {
  if (!st.stop.requested) { // checkpoints by time
    if (st.gather->due())
      st.gather->start(self, workers, st.finished);
    else if (st.gather->pausing()) // a worker lost meanwhile no longer counts; a pause too long is given up
      st.gather->release(self, workers, st.finished, st.gather->pause_too_long());
  }
  if (!st.stop.requested && o.stop != nullptr && o.stop->load())
    begin_stop(st, self, workers, o);
  if (st.stop.pausing && kernels::waited_longer(st.stop.sent, stop_pause_bound)) {
    log::warn("the workers did not reach a common step within {} s: stopping without a checkpoint",
              stop_pause_bound.count());
    st.stop.pausing = false;
    st.stop.sent = clock_type::now();
    stop_all(self, workers);
  }
  if (!st.stop.requested && o.budget_samples > 0 && st.total_samples >= o.budget_samples) {
    st.out.budget_reached = st.stop.requested = true; // each worker finishes its step and reports
    st.stop.sent = clock_type::now();
    stop_all(self, workers);
  }
  return !(st.stop.requested && !st.stop.pausing &&
           kernels::waited_longer(st.stop.sent, std::min<std::chrono::milliseconds>(o.timeout, stop_pause_bound)));
}

/// One message from the workers (or the transport), or none within `wait`.
bool receive_one(coordinator_state& st, caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                 std::chrono::milliseconds wait) {
  bool got = true;
  self->receive([&](actors::done_atom, actors::worker_report rep) { st.on_done(std::move(rep)); },
                [&](actors::lost_atom, actors::worker_report rep) { st.on_lost(std::move(rep)); },
                [&](actors::step_atom, int rank, std::int64_t step, std::int64_t n) { st.on_step(rank, step, n); },
                [&](actors::eval_atom, std::int64_t step, actors::slice params, actors::slice state) {
                  st.on_eval_snapshot(step, params, state);
                },
                [&](actors::metrics_atom, actors::step_metrics m) { st.on_window(m); },
                [&](actors::paused_atom, int rank, std::int64_t at) { st.on_paused(self, workers, rank, at); },
                [&](actors::snapshot_atom, const std::string& meta, const actors::slice& floats) {
                  st.on_snapshot(self, meta, floats);
                },
                [&](actors::replica_state_atom, const std::string& meta, const actors::slice& floats) {
                  st.on_rebuild_state(meta, floats);
                },
                [&](actors::abandoned_atom, int rank, std::int64_t steps, bool mid_round) {
                  st.on_reform_reply(rank, steps, mid_round);
                },
                [&](actors::adopted_atom, int rank, int generation) { st.on_adopted(rank, generation); },
                [&](actors::knock_atom, int rank) { st.on_rejoin(rank); }, // a lost worker's process asks back in
                [&](actors::reformed_atom, int rank, std::int64_t at, bool lost_round, double at_s, int after) {
                  st.on_reformed(rank, at, lost_round, at_s, after);
                },
                [&](actors::rejoined_atom, int rank, std::int64_t at, double at_s) { st.on_rejoined(rank, at, at_s); },
                caf::after(wait) >> [&] { got = false; });
  return got;
}

/// This process was stopped (SIGSTOP, a debugger): every worker gets a
/// fresh timeout, and the user is told once per stop. Across processes
/// (cut_off set) each rank's transport says so.
void note_process_stop(coordinator_state& st, const coordinator_options& o) {
  const auto stopped = kernels::last_stop_end();
  if (stopped == st.stop.seen)
    return;
  st.stop.seen = stopped;
  if (!o.cut_off)
    log::warn("this process did not run for {:.2f} s (stopped: suspended, Ctrl-Z, a debugger); every worker gets "
              "a fresh {:.2f} s timeout before any is judged silent",
              std::chrono::duration<double>(kernels::last_stop_length()).count(), o.timeout.count() / 1000.0);
}

} // namespace

coordination coordinate(caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                        const coordinator_options& o) {
  kernels::watch_stops();
  coordinator_state st(workers.size(), o.timeout, o.on_progress, o.on_metrics, o.on_eval, o.carry_on);
  st.plan = &o.checkpoints;
  st.gather.emplace(o.checkpoints, st.n, o.timeout);
  st.elastic = &o.elastic;
  st.reform.back_at = o.elastic.back_at_step;
  st.carried.assign(st.n, 0);
  st.workers = &workers;
  st.self = &self;
  st.cut_off = o.cut_off;
  st.on_finished = o.on_finished;
  st.virtual_time = o.virtual_time;
  while (st.done < st.n && st.out.failure.empty()) {
    if (!drive(st, self, workers, o))
      break;
    receive_one(st, self, workers, std::chrono::milliseconds(250));
    // A late coordinator (a loaded machine) finds steps waiting in its
    // mailbox: read them before anyone is judged silent.
    for (int k = 0; k < 4096 && st.any_silent() && receive_one(st, self, workers, std::chrono::milliseconds(0)); ++k) {
    }
    note_process_stop(st, o);
    st.check_silence();
    st.take_held();
  }
  st.fill_missing();
  return std::move(st.out);
}

} // namespace gradwire::scheduler
