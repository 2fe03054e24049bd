#include "scheduler/runtime/coordinator.hpp"

#include "scheduler/runtime/checkpoint_gather.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

namespace gradwire::scheduler {

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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (left > 0) {
    bool late = false;
    self->receive([&](caf::down_msg&) { --left; },
                  caf::after(std::chrono::milliseconds(500)) >> [&] { late = std::chrono::steady_clock::now() > deadline; });
    if (late) { // a handler that never returns (a hung kernel): say so rather than hang the process
      std::fprintf(stderr, "gradwire: %zu actor(s) still running 60 s after they were told to stop\n", left);
      return;
    }
  }
}

namespace {

using clock_type = std::chrono::steady_clock;

/// The coordinator's state through one run: who finished, who was heard
/// from when, and the reports so far. A message naming a rank that is not
/// a worker of this run is ignored (a bad peer cannot index past them).
struct coordinator_state {
  using progress_fn = std::function<void(std::int64_t, std::int64_t)>;
  using metrics_fn = std::function<void(const actors::step_metrics&)>;
  using eval_fn = std::function<void(std::int64_t, const actors::slice&, const actors::slice&)>;

  coordinator_state(std::size_t workers, std::chrono::milliseconds t, const progress_fn& p, const metrics_fn& m,
                    const eval_fn& e, bool carry)
      : timeout(t), on_progress(p), on_metrics(m), on_eval(e), carry_on(carry), n(workers),
        last_seen(n, clock_type::now()), steps(n, 0), samples(n, 0), finished(n, false) {
    out.reports.resize(n);
  }

  std::chrono::milliseconds timeout;
  const progress_fn& on_progress;
  const metrics_fn& on_metrics;
  const eval_fn& on_eval;
  bool carry_on;
  std::function<void(int, const std::string&)> cut_off;
  clock_type::time_point t0 = clock_type::now();
  std::size_t n;
  coordination out;
  std::vector<clock_type::time_point> last_seen;
  std::vector<std::int64_t> steps, samples;
  std::vector<bool> finished;
  std::size_t done = 0;
  bool stopping = false;
  clock_type::time_point stop_sent;

  bool known(int rank) const { return rank >= 0 && static_cast<std::size_t>(rank) < n; }

  std::int64_t total_samples = 0;

  /// Checkpoints being collected: step -> parts by worker rank.
  const checkpoint_plan* plan = nullptr;
  /// A stop that keeps a checkpoint: the workers' boundaries as they answer
  /// (pause_atom), then the step all run to (final_step).
  bool pausing = false;
  std::vector<std::int64_t> boundary;
  std::int64_t final_step = -1;

  void on_paused(caf::scoped_actor& self, const std::vector<caf::actor>& workers, int rank, std::int64_t at) {
    if (gather->pausing() && known(rank)) { // a checkpoint by time
      gather->boundary(rank, at);
      gather->release(self, workers, finished, false);
      return;
    }
    if (!pausing || !known(rank) || final_step >= 0)
      return;
    boundary[static_cast<std::size_t>(rank)] = at;
    std::int64_t last = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (!finished[r] && boundary[r] < 0)
        return;
      last = std::max(last, boundary[r]);
    }
    final_step = last;
    for (std::size_t r = 0; r < n; ++r)
      if (!finished[r])
        self->send(workers[r], actors::pause_atom::value, last);
    pausing = false; // from here as any stop: the workers finish within the stop's bound
    stop_sent = clock_type::now();
  }
  /// The checkpoints' parts, gathered (and the pauses of checkpoints by time).
  std::optional<checkpoint_gather> gather;

  bool lost(std::size_t r) const {
    return std::find(out.lost.begin(), out.lost.end(), static_cast<int>(r)) != out.lost.end();
  }

  /// Asking the shards for their parts kept this thread from hearing the workers.
  void heard_all() {
    for (auto& t : last_seen)
      t = std::max(t, clock_type::now() - std::chrono::milliseconds(50));
  }

  void on_snapshot(caf::scoped_actor& self, const std::string& meta, const actors::slice& floats) {
    if (gather->on_part(self, meta, floats, final_step, [this](std::size_t r) { return lost(r); }))
      heard_all();
  }

  void complete_pending(caf::scoped_actor& self) {
    if (gather->complete_pending(self, final_step, [this](std::size_t r) { return lost(r); }))
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
    if (!rep.error.empty() && !stopping)
      out.failure = rep.error;
    steps[r] = rep.steps;
    samples[r] = rep.samples;
    finished[r] = true;
    ++done;
    out.reports[r] = std::move(rep);
    totals();
  }

  // Elastic rings: the survivors re-form without a lost worker.
  const elastic_plan* elastic = nullptr;
  const std::vector<caf::actor>* workers = nullptr;
  caf::scoped_actor* self = nullptr;
  int generation = 0;
  std::vector<std::int64_t> survivors;
  std::map<int, std::pair<std::int64_t, bool>> reform_replies; ///< rank -> (steps, abandoned a round)
  std::int64_t reform_step = -1; ///< the step all go on from
  int donor = -1;
  std::vector<int> behind;

  double now_s() const { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

  /// Asks every survivor to abandon its round and say how far it got.
  void start_reform() {
    survivors.clear();
    for (std::size_t r = 0; r < n; ++r)
      if (!finished[r])
        survivors.push_back(static_cast<std::int64_t>(r));
    if (static_cast<int>(survivors.size()) < std::max(1, elastic->min_workers)) {
      out.failure = out.faults.back().what + " (" + std::to_string(survivors.size()) +
                    " worker(s) left, train.min_workers = " + std::to_string(elastic->min_workers) + ")";
      return;
    }
    ++generation;
    reform_replies.clear();
    reform_step = -1;
    donor = -1;
    behind.clear();
    for (auto r : survivors)
      (*self)->send((*workers)[static_cast<std::size_t>(r)], actors::reform_atom::value, generation);
  }

  void on_reform_reply(int rank, std::int64_t steps, bool abandoned) {
    if (!known(rank) || survivors.empty() || reform_step >= 0)
      return;
    reform_replies[rank] = {steps, abandoned};
    last_seen[static_cast<std::size_t>(rank)] = clock_type::now();
    for (auto r : survivors)
      if (!reform_replies.count(static_cast<int>(r)))
        return;
    std::int64_t most = 0, least = -1;
    bool lost_work = false;
    for (const auto& [r, v] : reform_replies) {
      most = std::max(most, v.first);
      least = least < 0 ? v.first : std::min(least, v.first);
      lost_work = lost_work || v.second;
    }
    reform_step = most;
    for (const auto& [r, v] : reform_replies) {
      if (v.first == most && donor < 0)
        donor = r;
      if (v.first < most)
        behind.push_back(r);
    }
    auto& f = out.faults.back();
    f.at_step = most;
    f.steps_lost = lost_work ? 1 : 0;
    if (behind.empty())
      rewire();
    else // a survivor a step behind takes the donor's state (its snapshot comes here first)
      (*self)->send((*workers)[static_cast<std::size_t>(donor)], actors::snapshot_atom::value, std::int64_t{generation});
  }

  /// The donor's state for the survivors behind it, then the new ring.
  bool on_donor_state(const std::string& meta, const actors::slice& floats) {
    if (donor < 0 || behind.empty())
      return false;
    actors::snapshot_frame f;
    try {
      f = actors::snapshot_frame::checked(meta, floats, "the donor's state");
    } catch (const std::exception&) {
      return false;
    }
    if (f.who != "worker " + std::to_string(donor) || f.step != reform_step)
      return false;
    for (int r : behind)
      (*self)->send((*workers)[static_cast<std::size_t>(r)], actors::snapshot_atom::value, meta, floats);
    behind.clear();
    rewire();
    return true;
  }

  void rewire() {
    const auto m = survivors.size();
    for (std::size_t i = 0; i < m; ++i)
      (*self)->send((*workers)[static_cast<std::size_t>(survivors[i])], actors::reform_atom::value, generation, survivors,
                    (*workers)[static_cast<std::size_t>(survivors[(i + 1) % m])]);
    auto& f = out.faults.back();
    f.recovered_at = now_s();
    f.workers_after = static_cast<int>(m);
    std::fprintf(stderr, "gradwire: the ring goes on without worker %d: %zu workers from step %lld (%.2f s after the loss was detected)\n",
                 f.rank, m, static_cast<long long>(reform_step), f.recovered_at - f.detected_at);
    survivors.clear();
  }

  /// A parameter server without a lost worker: the shards and the
  /// survivors hear of it; nothing is redone.
  void go_on_without() {
    std::vector<std::int64_t> left; // not lost (some may have finished their steps already)
    for (std::size_t r = 0; r < n; ++r)
      if (std::find(out.lost.begin(), out.lost.end(), static_cast<int>(r)) == out.lost.end())
        left.push_back(static_cast<std::int64_t>(r));
    auto& f = out.faults.back();
    if (static_cast<int>(left.size()) < std::max(1, elastic->min_workers)) {
      out.failure = f.what + " (" + std::to_string(left.size()) + " worker(s) left, train.min_workers = " +
                    std::to_string(elastic->min_workers) + ")";
      return;
    }
    ++generation;
    for (const auto& s : elastic->shards)
      (*self)->send(s, actors::reform_atom::value, generation, left);
    for (auto r : left)
      (*self)->send((*workers)[static_cast<std::size_t>(r)], actors::reform_atom::value, generation, left);
    std::int64_t most = 0;
    for (auto r : left)
      most = std::max(most, steps[static_cast<std::size_t>(r)]);
    f.at_step = most;
    f.steps_lost = 0;
    f.recovered_at = now_s();
    f.workers_after = static_cast<int>(left.size());
    std::fprintf(stderr, "gradwire: carrying on without worker %d: %zu workers\n", f.rank, left.size());
  }

  /// A worker whose process failed.
  void on_lost(actors::worker_report rep) {
    if (!known(rep.rank) || finished[static_cast<std::size_t>(rep.rank)])
      return;
    // "rank R lost rank P": a rank that lost a neighbour (join_across.cpp).
    // When R itself is gone by now (a link down between R and P: each
    // reports the other, and the first report processed decides), its word
    // no longer counts.
    int reporter = -1, about = -1;
    if (std::sscanf(rep.error.c_str(), "rank %d lost rank %d", &reporter, &about) == 2 && known(reporter) &&
        lost(static_cast<std::size_t>(reporter)))
      return;
    const auto r = static_cast<std::size_t>(rep.rank);
    // Reported by another rank (it lost contact), the lost rank may still
    // be running: it is cut off and told so, and leaves the job.
    if (cut_off && rep.rank != 0 && !stopping && (carry_on || (elastic != nullptr && elastic->on)))
      cut_off(rep.rank, rep.error);
    if (elastic != nullptr && elastic->on && !stopping) {
      std::fprintf(stderr, "gradwire: lost worker %zu: %s\n", r, rep.error.c_str());
      fault_record f;
      f.origin = t0;
      f.rank = rep.rank;
      f.what = rep.error;
      f.detected_at = now_s();
      out.faults.push_back(f);
      rep.steps = steps[r];
      rep.samples = samples[r];
      rep.seconds = now_s();
      out.lost.push_back(rep.rank);
      finished[r] = true;
      ++done;
      out.reports[r] = std::move(rep);
      if (elastic->tell_survivors)
        go_on_without();
      else
        start_reform();
      complete_pending(*self);
      return;
    }
    if (!carry_on && !stopping) {
      out.failure = rep.error;
      if (elastic != nullptr && !elastic->why_not.empty())
        out.failure += " (" + elastic->why_not + ")";
      return;
    }
    std::fprintf(stderr, "gradwire: carrying on without worker %zu: %s\n", r, rep.error.c_str());
    if (!stopping) {
      fault_record f;
      f.origin = t0;
      f.rank = rep.rank;
      f.what = rep.error;
      f.detected_at = f.recovered_at = now_s();
      f.at_step = steps[r];
      out.faults.push_back(f);
    }
    rep.steps = steps[r];
    rep.samples = samples[r];
    rep.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    out.lost.push_back(static_cast<int>(r));
    finished[r] = true;
    ++done;
    out.reports[r] = std::move(rep);
  }

  void on_step(int rank, std::int64_t step, std::int64_t sample_count) {
    if (!known(rank))
      return;
    const auto r = static_cast<std::size_t>(rank);
    last_seen[r] = clock_type::now();
    steps[r] = step;
    samples[r] = sample_count;
    totals();
  }

  void on_eval_snapshot(std::int64_t step, const actors::slice& params, const actors::slice& state) {
    if (on_eval && !stopping)
      on_eval(step, params, state);
    for (auto& t : last_seen) // evaluating kept this thread from hearing the workers
      t = std::max(t, clock_type::now() - std::chrono::milliseconds(50));
  }

  void on_window(const actors::step_metrics& m) {
    if (!known(m.rank))
      return;
    last_seen[static_cast<std::size_t>(m.rank)] = clock_type::now();
    if (on_metrics)
      on_metrics(m);
  }

  void check_silence() {
    for (std::size_t r = 0; r < n && out.failure.empty() && !stopping; ++r) {
      if (finished[r] || clock_type::now() - last_seen[r] <= timeout)
        continue;
      const auto why = "worker rank " + std::to_string(r) + " silent for " + std::to_string(timeout.count()) +
                       " ms (last heard at step " + std::to_string(steps[r]) + "; train.step_timeout_s)";
      if (!carry_on && !(elastic != nullptr && elastic->on)) {
        out.failure = why;
        continue;
      }
      last_seen[r] = clock_type::now(); // asked once per timeout
      if (cut_off) { // its loss comes back as a lost report
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

} // namespace

coordination coordinate(caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                        std::chrono::milliseconds timeout,
                        const std::function<void(std::int64_t, std::int64_t)>& on_progress,
                        const std::function<void(const actors::step_metrics&)>& on_metrics,
                        const std::atomic<bool>* stop, bool carry_on,
                        const std::function<void(std::int64_t, const actors::slice&, const actors::slice&)>& on_eval,
                        const std::function<void(int rank, const std::string& why)>& cut_off,
                        std::int64_t budget_samples, const checkpoint_plan& checkpoints,
                        const elastic_plan& elastic) {
  coordinator_state st(workers.size(), timeout, on_progress, on_metrics, on_eval, carry_on);
  st.plan = &checkpoints;
  st.gather.emplace(checkpoints, st.n, timeout);
  st.elastic = &elastic;
  st.workers = &workers;
  st.self = &self;
  st.cut_off = cut_off;
  while (st.done < st.n && st.out.failure.empty()) {
    if (!st.stopping) { // checkpoints by time
      if (st.gather->due())
        st.gather->start(self, workers, st.finished);
      else if (st.gather->pausing()) // a worker lost meanwhile no longer counts; a pause too long is given up
        st.gather->release(self, workers, st.finished, st.gather->pause_too_long());
    }
    if (!st.stopping && stop != nullptr && stop->load()) {
      st.gather->cancel(); // the stop's own pause takes over
      st.out.interrupted = st.stopping = true;
      st.stop_sent = clock_type::now();
      if (checkpoints.on_checkpoint) {
        // Keep a checkpoint: every worker holds at its next boundary, then
        // all run to the last of those, snapshot it and report.
        st.pausing = true;
        st.boundary.assign(st.n, -1);
        for (std::size_t r = 0; r < st.n; ++r)
          if (!st.finished[r])
            self->send(workers[r], actors::pause_atom::value);
      } else { // each worker finishes at its next step boundary and reports
        for (const auto& w : workers)
          self->send(w, actors::done_atom::value);
      }
    }
    if (st.pausing && clock_type::now() - st.stop_sent > std::chrono::seconds(10)) {
      std::fprintf(stderr, "gradwire: the workers did not reach a common step within 10 s: stopping without a checkpoint\n");
      st.pausing = false;
      st.stop_sent = clock_type::now();
      for (const auto& w : workers)
        self->send(w, actors::done_atom::value);
    }
    if (!st.stopping && budget_samples > 0 && st.total_samples >= budget_samples) {
      // The shared budget is spent: each worker finishes its step and reports.
      st.out.budget_reached = st.stopping = true;
      st.stop_sent = clock_type::now();
      for (const auto& w : workers)
        self->send(w, actors::done_atom::value);
    }
    if (st.stopping && !st.pausing &&
        clock_type::now() - st.stop_sent > std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)))
      break;
    self->receive([&](actors::done_atom, actors::worker_report rep) { st.on_done(std::move(rep)); },
                  [&](actors::done_atom, actors::worker_report rep, bool) { st.on_lost(std::move(rep)); },
                  [&](actors::step_atom, int rank, std::int64_t step, std::int64_t n) { st.on_step(rank, step, n); },
                  [&](actors::eval_atom, std::int64_t step, actors::slice params, actors::slice state) {
                    st.on_eval_snapshot(step, params, state);
                  },
                  [&](actors::metrics_atom, actors::step_metrics m) { st.on_window(m); },
                  [&](actors::pause_atom, int rank, std::int64_t at) { st.on_paused(self, workers, rank, at); },
                  [&](actors::snapshot_atom, const std::string& meta, const actors::slice& floats) {
                    if (!st.on_donor_state(meta, floats))
                      st.on_snapshot(self, meta, floats);
                  },
                  [&](actors::reform_atom, int rank, std::int64_t steps, bool abandoned) {
                    st.on_reform_reply(rank, steps, abandoned);
                  },
                  caf::after(std::chrono::milliseconds(250)) >> [] {});
    st.check_silence();
  }
  st.fill_missing();
  return std::move(st.out);
}

} // namespace gradwire::scheduler
