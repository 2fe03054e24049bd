#include "scheduler/runtime/coordinator.hpp"

#include <cstdio>

namespace gradwire::scheduler {

void stop_actors(caf::scoped_actor& self, const std::vector<caf::actor>& actors) {
  for (const auto& a : actors)
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

coordination coordinate(caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                        std::chrono::milliseconds timeout,
                        const std::function<void(std::int64_t, std::int64_t)>& on_progress,
                        const std::function<void(const actors::step_metrics&)>& on_metrics,
                        const std::atomic<bool>* stop, bool carry_on,
                        const std::function<void(std::int64_t, const actors::slice&, const actors::slice&)>& on_eval) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const std::size_t n = workers.size();
  coordination out;
  out.reports.resize(n);
  std::vector<clock::time_point> last_seen(n, clock::now());
  std::vector<std::int64_t> steps(n, 0), samples(n, 0);
  std::vector<bool> finished(n, false);
  std::size_t done = 0;
  bool stopping = false;
  clock::time_point stop_sent;
  auto totals = [&] {
    std::int64_t a = 0, b = 0;
    for (std::size_t r = 0; r < n; ++r) {
      a += steps[r];
      b += samples[r];
    }
    if (on_progress)
      on_progress(a, b);
  };
  while (done < n && out.failure.empty()) {
    if (!stopping && stop != nullptr && stop->load()) {
      // Each worker finishes at its next step boundary and reports.
      out.interrupted = stopping = true;
      stop_sent = clock::now();
      for (const auto& w : workers)
        self->send(w, actors::done_atom::value);
    }
    if (stopping && clock::now() - stop_sent > std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)))
      break; // what has not reported by now is described by its last heartbeat
    self->receive(
      [&](actors::done_atom, actors::worker_report rep) {
        const auto r = static_cast<std::size_t>(rep.rank);
        if (r >= n || finished[r])
          return;
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
      },
      [&](actors::done_atom, actors::worker_report rep, bool) { // its process failed
        const auto r = static_cast<std::size_t>(rep.rank);
        if (r >= n || finished[r])
          return;
        if (!carry_on && !stopping) {
          out.failure = rep.error;
          return;
        }
        std::fprintf(stderr, "gradwire: carrying on without worker %zu: %s\n", r, rep.error.c_str());
        rep.steps = steps[r];
        rep.samples = samples[r];
        rep.seconds = std::chrono::duration<double>(clock::now() - t0).count();
        out.lost.push_back(static_cast<int>(r));
        finished[r] = true;
        ++done;
        out.reports[r] = std::move(rep);
      },
      [&](actors::step_atom, int rank, std::int64_t step, std::int64_t sample_count) {
        const auto r = static_cast<std::size_t>(rank);
        last_seen[r] = clock::now();
        steps[r] = step;
        samples[r] = sample_count;
        totals();
      },
      [&](actors::eval_atom, std::int64_t step, actors::slice params, actors::slice state) {
        if (on_eval && !stopping)
          on_eval(step, params, state);
        for (auto& t : last_seen) // evaluating kept this thread from hearing the workers
          t = std::max(t, clock::now() - std::chrono::milliseconds(50));
      },
      [&](actors::metrics_atom, actors::step_metrics m) {
        last_seen[static_cast<std::size_t>(m.rank)] = clock::now();
        if (on_metrics)
          on_metrics(m);
      },
      caf::after(std::chrono::milliseconds(250)) >> [] {});
    for (std::size_t r = 0; r < n && out.failure.empty() && !stopping; ++r)
      if (!finished[r] && clock::now() - last_seen[r] > timeout)
        out.failure = "worker rank " + std::to_string(r) + " silent for " + std::to_string(timeout.count()) +
                      " ms (last heard at step " + std::to_string(steps[r]) + ")";
  }
  for (std::size_t r = 0; r < n; ++r)
    if (!finished[r]) { // what its last heartbeat said
      out.reports[r].rank = static_cast<int>(r);
      out.reports[r].steps = steps[r];
      out.reports[r].samples = samples[r];
      out.reports[r].seconds = std::chrono::duration<double>(clock::now() - t0).count();
    }
  return out;
}

} // namespace gradwire::scheduler
