#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/topology_parts.hpp"

#include <algorithm>
#include <cstring>

namespace gradwire::scheduler {

topology_outcome run_ps_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                               const progress_fn& on_progress, const metrics_fn& on_metrics,
                               const std::atomic<bool>* stop) {
  const bool local = setup.kind == topology_kind::local_sgd;
  check(setup.backup >= 0 && setup.backup < setup.workers,
        "topology.backup_workers = " + std::to_string(setup.backup) + " must be below topology.workers = " +
          std::to_string(setup.workers));
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
    sc.backup = setup.sync && !local ? setup.backup : 0;
    sc.last_version = setup.steps;
    sc.dc_lambda = setup.sync || local ? 0.f : setup.dc_lambda;
    sc.average = local;
    sc.opt = setup.opt;
    auto slice0 = kernels::tensor::empty({static_cast<std::int64_t>(sc.end - sc.begin)});
    std::memcpy(slice0.data(), initial.params().data() + sc.begin, (sc.end - sc.begin) * sizeof(float));
    shards.push_back(actors::spawn_ps_shard(sys, sc, slice0));
  }
  caf::scoped_actor self{sys};
  std::vector<caf::actor> workers;
  for (int r = 0; r < setup.workers; ++r) {
    auto wc = base_worker(setup, data, r, self);
    wc.shards = shards;
    wc.ranges = ranges;
    wc.sync = setup.sync;
    wc.backup = setup.sync && !local && setup.backup > 0;
    wc.local_steps = local ? setup.local_steps : 0;
    wc.staleness_bound = setup.staleness_bound;
    workers.push_back(actors::spawn_worker(sys, wc));
  }
  auto c = coordinate(self, workers, setup.timeout, on_progress, on_metrics, stop);
  if (!c.failure.empty()) {
    stop_actors(self, workers);
    stop_actors(self, shards);
    throw error("parameter server: " + c.failure);
  }
  stop_actors(self, workers);
  topology_outcome out;
  out.interrupted = c.interrupted;
  out.reports = std::move(c.reports);
  out.params.assign(initial.size(), 0.f);
  out.dropped.assign(static_cast<std::size_t>(setup.workers), 0);
  std::string failure;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    self->request(shards[i], setup.timeout, actors::fetch_atom::value)
      .receive(
        [&](std::int64_t, actors::slice p) {
          std::memcpy(out.params.data() + ranges[i].first, p.data(), static_cast<std::size_t>(p.numel()) * sizeof(float));
        },
        [&](caf::error& e) { failure = "shard " + std::to_string(i) + ": " + sys.render(e); });
    self->request(shards[i], setup.timeout, actors::stats_atom::value)
      .receive(
        [&](std::int64_t, actors::histogram h, std::int64_t gap, std::vector<std::int64_t> dropped) {
          out.max_clock_gap = std::max(out.max_clock_gap, gap);
          if (out.staleness.size() < h.size())
            out.staleness.resize(h.size(), 0);
          for (std::size_t k = 0; k < h.size(); ++k)
            out.staleness[k] += h[k];
          for (std::size_t r = 0; r < dropped.size() && r < out.dropped.size(); ++r)
            out.dropped[r] += dropped[r];
        },
        [&](caf::error& e) { failure = "shard " + std::to_string(i) + ": " + sys.render(e); });
  }
  stop_actors(self, shards);
  check(failure.empty(), "parameter server: " + failure);
  return out;
}

} // namespace gradwire::scheduler
