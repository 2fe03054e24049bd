#include "scheduler/ps_topology.hpp"

#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"

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
                                const models::dataset& data) {
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
    wc.opt = setup.opt;
    wc.data = &data;
    wc.report_to = self;
    wc.timeout = setup.timeout;
    workers.push_back(actors::spawn_worker(sys, wc));
  }
  ps_outcome out;
  out.reports.resize(static_cast<std::size_t>(setup.workers));
  std::string failure;
  for (int got = 0; got < setup.workers; ++got) {
    bool timed_out = false;
    self->receive(
      [&](actors::done_atom, actors::worker_report rep) {
        if (!rep.error.empty() && failure.empty())
          failure = rep.error;
        out.reports[static_cast<std::size_t>(rep.rank)] = std::move(rep);
      },
      caf::after(setup.timeout) >> [&] { timed_out = true; });
    if (timed_out) {
      std::string missing;
      for (int r = 0; r < setup.workers; ++r)
        if (out.reports[static_cast<std::size_t>(r)].steps == 0 && out.reports[static_cast<std::size_t>(r)].samples == 0)
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      failure = "no report from worker rank(s) " + missing + " within " +
                std::to_string(setup.timeout.count()) + " ms";
      break;
    }
    if (!failure.empty())
      break; // one failed worker stalls sync shards: stop at once
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
        [&](std::int64_t, actors::histogram h) {
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
