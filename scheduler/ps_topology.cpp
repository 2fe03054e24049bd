#include "scheduler/ps_topology.hpp"

#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"

#include <algorithm>
#include <cstring>

namespace gradwire::scheduler {

std::vector<std::pair<std::size_t, std::size_t>> shard_ranges(std::size_t n, int parts) {
  check(parts >= 1, "topology.shards must be at least 1");
  std::vector<std::pair<std::size_t, std::size_t>> r;
  for (int i = 0; i < parts; ++i) {
    auto edge = [&](int k) { return k == parts ? n : n * static_cast<std::size_t>(k) / static_cast<std::size_t>(parts) / 16 * 16; };
    r.emplace_back(edge(i), edge(i + 1));
  }
  return r;
}

ps_outcome run_parameter_server(caf::actor_system& sys, const ps_setup& setup,
                                const models::dataset& data,
                                const std::function<void(std::int64_t, std::int64_t)>& on_progress,
                                const std::function<void(const actors::step_metrics&)>& on_metrics,
                                const std::atomic<bool>* stop) {
  check(setup.workers >= 1, "topology.workers must be at least 1");
  const auto t0 = std::chrono::steady_clock::now();
  models::model initial(setup.spec, kernels::device::cpu(), setup.seed);
  const auto ranges = shard_ranges(initial.size(), setup.shards);
  for (const auto& [b, e] : ranges)
    check(e > b, "topology.shards = " + std::to_string(setup.shards) + " leaves a shard empty (the model has " +
                   std::to_string(initial.size()) + " parameters)");
  std::vector<caf::actor> shards;
  for (int i = 0; i < setup.shards; ++i) {
    actors::shard_config sc;
    sc.id = i;
    sc.begin = ranges[static_cast<std::size_t>(i)].first;
    sc.end = ranges[static_cast<std::size_t>(i)].second;
    sc.workers = setup.workers;
    sc.sync = setup.sync;
    sc.staleness_lr = setup.staleness_lr;
    sc.average = setup.local_steps > 0;
    sc.opt = setup.opt;
    auto slice0 = kernels::tensor::empty({static_cast<std::int64_t>(sc.end - sc.begin)});
    std::memcpy(slice0.data(), initial.params().data() + sc.begin, (sc.end - sc.begin) * sizeof(float));
    shards.push_back(actors::spawn_ps_shard(sys, sc, slice0));
  }
  caf::scoped_actor self{sys};
  std::vector<caf::actor> workers;
  for (int r = 0; r < setup.workers; ++r) {
    actors::worker_config wc;
    wc.rank = r;
    wc.world = setup.workers;
    wc.shards = shards;
    wc.ranges = ranges;
    wc.spec = setup.spec;
    wc.threads = setup.threads;
    wc.how = setup.how;
    const auto ri = static_cast<std::size_t>(r);
    wc.batch_size = ri < setup.worker_batch.size() ? setup.worker_batch[ri] : setup.batch_size;
    wc.slowdown = ri < setup.worker_slowdown.size() ? setup.worker_slowdown[ri] : 1.0;
    wc.steps = setup.steps;
    wc.seed = setup.seed;
    wc.sync = setup.sync;
    wc.local_steps = setup.local_steps;
    wc.staleness_bound = setup.staleness_bound;
    wc.log_every = setup.log_every;
    wc.opt = setup.opt;
    wc.data = &data;
    wc.report_to = self;
    // Twice the silence limit: when one worker stalls a sync step, the
    // others' requests must not time out before the stalled one is named.
    wc.timeout = 2 * setup.timeout;
    workers.push_back(actors::spawn_worker(sys, wc));
  }
  ps_outcome out;
  const auto n = static_cast<std::size_t>(setup.workers);
  out.reports.resize(n);
  std::string failure;
  // Wait for every worker's report; fail when one stays silent (no
  // heartbeat, no report) for longer than the timeout.
  using clock = std::chrono::steady_clock;
  std::vector<clock::time_point> last_seen(n, clock::now());
  std::vector<std::int64_t> steps(n, 0), samples(n, 0);
  std::vector<bool> finished(n, false);
  std::size_t done = 0;
  auto totals = [&] {
    std::int64_t a = 0, b = 0;
    for (std::size_t r = 0; r < n; ++r) {
      a += steps[r];
      b += samples[r];
    }
    if (on_progress)
      on_progress(a, b);
  };
  while (done < n && failure.empty()) {
    if (stop != nullptr && stop->load()) {
      out.interrupted = true;
      break;
    }
    self->receive(
      [&](actors::done_atom, actors::worker_report rep) {
        const auto r = static_cast<std::size_t>(rep.rank);
        if (!rep.error.empty())
          failure = rep.error; // one failed worker stalls sync shards: stop at once
        steps[r] = rep.steps;
        samples[r] = rep.samples;
        finished[r] = true;
        ++done;
        out.reports[r] = std::move(rep);
        totals();
      },
      [&](actors::step_atom, int rank, std::int64_t step, std::int64_t sample_count) {
        const auto r = static_cast<std::size_t>(rank);
        last_seen[r] = clock::now();
        steps[r] = step;
        samples[r] = sample_count;
        totals();
      },
      [&](actors::metrics_atom, actors::step_metrics m) {
        last_seen[static_cast<std::size_t>(m.rank)] = clock::now();
        if (on_metrics)
          on_metrics(m);
      },
      caf::after(std::chrono::milliseconds(250)) >> [] {});
    for (std::size_t r = 0; r < n && failure.empty(); ++r)
      if (!finished[r] && clock::now() - last_seen[r] > setup.timeout)
        failure = "worker rank " + std::to_string(r) + " silent for " + std::to_string(setup.timeout.count()) +
                  " ms (last heard at step " + std::to_string(steps[r]) + ")";
  }
  auto stop_all = [&] {
    for (auto& w : workers)
      self->send_exit(w, caf::exit_reason::user_shutdown);
    for (auto& s : shards)
      self->send_exit(s, caf::exit_reason::user_shutdown);
  };
  if (!failure.empty()) {
    stop_all();
    throw error("parameter server: " + failure);
  }
  if (out.interrupted) { // stop the workers first; the shards still answer
    for (auto& w : workers)
      self->send_exit(w, caf::exit_reason::user_shutdown);
    for (std::size_t r = 0; r < n; ++r)
      if (!finished[r]) { // what its last heartbeat said
        out.reports[r].rank = static_cast<int>(r);
        out.reports[r].steps = steps[r];
        out.reports[r].samples = samples[r];
        out.reports[r].seconds = std::chrono::duration<double>(clock::now() - t0).count();
      }
  }
  out.params.assign(initial.size(), 0.f);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    self->request(shards[i], setup.timeout, actors::fetch_atom::value)
      .receive(
        [&](std::int64_t, actors::slice p) {
          std::memcpy(out.params.data() + ranges[i].first, p.data(), static_cast<std::size_t>(p.numel()) * sizeof(float));
        },
        [&](caf::error& e) { failure = "shard " + std::to_string(i) + ": " + sys.render(e); });
    self->request(shards[i], setup.timeout, actors::stats_atom::value)
      .receive(
        [&](std::int64_t, actors::histogram h, std::int64_t gap) {
          out.max_clock_gap = std::max(out.max_clock_gap, gap);
          if (out.staleness.size() < h.size())
            out.staleness.resize(h.size(), 0);
          for (std::size_t k = 0; k < h.size(); ++k)
            out.staleness[k] += h[k];
        },
        [&](caf::error& e) { failure = "shard " + std::to_string(i) + ": " + sys.render(e); });
  }
  stop_all();
  check(failure.empty(), "parameter server: " + failure);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

} // namespace gradwire::scheduler
