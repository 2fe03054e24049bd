#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/runtime/topology_parts.hpp"

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
  // Across processes: the shards and the coordinator live on rank 0, one
  // worker in every process; the workers' pulls and pushes are requests
  // that cross the transport.
  auto* nd = setup.node.get();
  const int rank = nd ? nd->rank() : 0;
  if (nd)
    check(setup.workers == nd->size(), "topology.workers = " + std::to_string(setup.workers) + " but the job has " +
                                         std::to_string(nd->size()) + " processes: across processes each process "
                                         "runs one worker (set topology.workers = " + std::to_string(nd->size()) + ")");
  // Shard i lives on rank 0, or on rank i mod processes (spread).
  auto home = [&](int i) { return nd && setup.spread_shards ? i % nd->size() : 0; };
  std::vector<caf::actor> shards;       ///< this process's own
  std::vector<caf::actor> shard_handles(static_cast<std::size_t>(setup.shards)); ///< every shard, by id
  for (int i = 0; i < setup.shards; ++i) {
    if (home(i) != rank) {
      shard_handles[static_cast<std::size_t>(i)] = nd->remote(home(i), transport::slots::shard(i));
      continue;
    }
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
    sc.trace = setup.trace;
    auto slice0 = kernels::tensor::empty({static_cast<std::int64_t>(sc.end - sc.begin)});
    std::memcpy(slice0.data(), initial.params().data() + sc.begin, (sc.end - sc.begin) * sizeof(float));
    shards.push_back(actors::spawn_ps_shard(sys, sc, slice0));
    shard_handles[static_cast<std::size_t>(i)] = shards.back();
    if (nd)
      nd->publish(transport::slots::shard(i), shards.back());
  }
  // Spread shards outlive their process's worker: every rank keeps its
  // shards until rank 0 has fetched them (the others may still push).
  constexpr int shards_fetched = 2;
  const bool wait_for_fetch = nd && setup.spread_shards && setup.sync_ranks;
  auto config_of = [&](int r, const caf::actor& report_to) {
    auto wc = base_worker(setup, data, r, report_to);
    wc.shards = shard_handles;
    wc.ranges = ranges;
    wc.sync = setup.sync;
    wc.backup = setup.sync && !local && setup.backup > 0;
    wc.local_steps = local ? setup.local_steps : 0;
    wc.staleness_bound = setup.staleness_bound;
    wc.push_pull = setup.push_pull && !setup.sync && !local && setup.staleness_bound < 0;
    return wc;
  };
  caf::scoped_actor self{sys};
  std::vector<caf::actor> local_workers;
  coordination c;
  if (nd) {
    // An async parameter server waits for no worker: it carries on without one whose process failed.
    const bool carry_on = !setup.sync && setup.staleness_bound < 0 && !local && !setup.spread_shards;
    auto got = run_worker_across(
      sys, setup, [&](const caf::actor& to) { return actors::spawn_worker(sys, config_of(rank, to)); },
      [](caf::scoped_actor&, const caf::actor&, const std::vector<caf::actor>&) {}, // workers start on their own
      on_progress, on_metrics, stop, carry_on);
    if (!got) {
      if (wait_for_fetch)
        setup.sync_ranks(shards_fetched);
      stop_actors(self, shards);
      return {};
    }
    c = std::move(*got);
  } else {
    std::vector<caf::actor> workers;
    for (int r = 0; r < setup.workers; ++r)
      workers.push_back(actors::spawn_worker(sys, config_of(r, self)));
    local_workers = workers;
    c = coordinate(self, workers, setup.timeout, on_progress, on_metrics, stop, false, setup.on_eval);
  }
  if (!c.failure.empty()) {
    stop_actors(self, local_workers);
    stop_actors(self, shards);
    throw error("parameter server: " + c.failure); // the other ranks stop with rank 0
  }
  stop_actors(self, local_workers);
  topology_outcome out;
  out.interrupted = c.interrupted;
  out.lost = c.lost;
  out.reports = std::move(c.reports);
  out.params.assign(initial.size(), 0.f);
  out.dropped.assign(static_cast<std::size_t>(setup.workers), 0);
  std::string failure;
  for (std::size_t i = 0; i < shard_handles.size(); ++i) { // on any rank
    self->request(shard_handles[i], setup.timeout, actors::fetch_atom::value)
      .receive(
        [&](std::int64_t, actors::slice p) {
          std::memcpy(out.params.data() + ranges[i].first, p.data(), static_cast<std::size_t>(p.numel()) * sizeof(float));
        },
        [&](caf::error& e) { failure = "shard " + std::to_string(i) + ": " + sys.render(e); });
    self->request(shard_handles[i], setup.timeout, actors::stats_atom::value)
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
  if (wait_for_fetch)
    setup.sync_ranks(shards_fetched); // the other ranks may let their shards go
  stop_actors(self, shards);
  check(failure.empty(), "parameter server: " + failure);
  return out;
}

} // namespace gradwire::scheduler
