/// @file halos_wiring.cpp
/// The HALoS wiring: the global server's shards (async DiLoCo shards whose
/// clients are the groups), a local server per group (shards of the same
/// ranges under halos_rule.hpp's rule, each linked to the global shard of
/// its range), and parameter-server workers that run async DiLoCo's
/// rounds against their group's local server. In one process and in
/// virtual time (the global server on host 0, each local server on its
/// group's first worker's host, so that the exchanges cross the modelled
/// links between hosts and the workers' pushes stay within), and across
/// processes (the global server on rank 0, each local server on its
/// group's first rank, grouped by host with topology.group_size = 0).

#include "actors/halos_rule.hpp"
#include "actors/ps_shard.hpp"
#include "actors/ring_peer.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/runtime/execution.hpp"
#include "scheduler/runtime/halos_wiring.hpp"
#include "scheduler/runtime/shard_results.hpp"
#include "scheduler/runtime/virtual_time.hpp"
#include "transport/slots.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace gradwire::scheduler {

namespace {

using range_list = std::vector<std::pair<std::size_t, std::size_t>>;

/// Every worker's group, by rank (topology.group_size; 0: by host).
std::vector<int> groups_of(const topology_setup& s) {
  if (!s.ring.group_of.empty())
    return s.ring.group_of;
  return actors::consecutive_groups(s.workers, std::max(1, s.ring.group_size));
}

/// What every shard of either tier shares.
actors::shard_config tier_config(const topology_setup& setup, const range_list& ranges, int i, int clients) {
  actors::shard_config sc;
  sc.id = i;
  sc.begin = ranges[static_cast<std::size_t>(i)].first;
  sc.end = ranges[static_cast<std::size_t>(i)].second;
  sc.workers = clients;
  sc.ps.sync = false;
  sc.ps.local_steps = setup.ps.local_steps;
  sc.ps.outer = true;
  sc.ps.push_pull = true;
  sc.opt = setup.opt;
  sc.trace = setup.trace;
  sc.vclock = setup.sim;
  return sc;
}

/// Both tiers: the global server's shards, then each group's local server.
struct halos_servers {
  range_list ranges;
  std::vector<actors::shard_actor> global;             ///< by shard
  std::vector<std::vector<actors::shard_actor>> local; ///< by group, by shard
  std::vector<caf::actor> own;                         ///< every one spawned here (to stop them)
};

/// Shard `sc` at home on `home`: spawned here (placed on `host` in virtual
/// time; across processes published in its slot), or another rank's proxy.
actors::shard_actor shard_at(caf::actor_system& sys, const topology_setup& setup, halos_servers& s,
                             const actors::shard_config& sc, int home, int host, const float* params) {
  auto* nd = setup.node.get();
  const auto slot = transport::slots::shard(sc.id);
  if (nd && nd->rank() != home)
    return actors::as_shard(nd->remote(home, slot));
  auto slice0 = kernels::tensor::empty({static_cast<std::int64_t>(sc.end - sc.begin)});
  std::memcpy(slice0.data(), params + sc.begin, (sc.end - sc.begin) * sizeof(float));
  auto a = actors::spawn_ps_shard(sys, sc, slice0);
  s.own.push_back(caf::actor_cast<caf::actor>(a));
  if (nd)
    nd->publish(slot, s.own.back());
  if (!setup.sim)
    return a;
  return actors::as_shard(setup.sim->place(s.own.back(), host));
}

/// The global server's shards are 0 .. shards - 1 on rank 0 (host 0); group
/// g's local server's are (g + 1) x shards + i, on the rank (the host) of
/// the group's first worker.
halos_servers spawn_servers(caf::actor_system& sys, const topology_setup& setup, const models::model& initial,
                            const std::vector<int>& group_of) {
  halos_servers s;
  s.ranges = shard_ranges(initial.size(), setup.ps.shards);
  const int groups = *std::max_element(group_of.begin(), group_of.end()) + 1;
  check((groups + 1) * setup.ps.shards <= static_cast<int>(transport::slots::max_indexed),
        fmt::format("HALoS: {} groups of {} shard(s) each, and the global server's, exceed {} shards",
                    groups, setup.ps.shards, transport::slots::max_indexed));
  const float* params = initial.params().data();
  for (int i = 0; i < setup.ps.shards; ++i) {
    auto sc = tier_config(setup, s.ranges, i, groups);
    sc.ps.outer_lr = setup.halos.global_lr;
    sc.ps.outer_momentum = setup.halos.global_momentum;
    s.global.push_back(shard_at(sys, setup, s, sc, 0, 0, params));
  }
  s.local.resize(static_cast<std::size_t>(groups));
  for (int grp = 0; grp < groups; ++grp) {
    const int first = static_cast<int>(std::find(group_of.begin(), group_of.end(), grp) - group_of.begin());
    const int host = setup.sim ? setup.sim->host_of_worker(first) : 0;
    for (int i = 0; i < setup.ps.shards; ++i) {
      auto sc = tier_config(setup, s.ranges, i, setup.workers);
      sc.id = (grp + 1) * setup.ps.shards + i;
      const actors::halos_link up{s.global[static_cast<std::size_t>(i)], grp, setup.request_timeout()};
      const auto opts = setup.halos;
      sc.make_rule = [opts, up](std::size_t len, const actors::slice& init) {
        return actors::make_halos_rule(opts, up, len, init);
      };
      sc.worker_lr_scale = setup.worker_lr_scale;
      s.local[static_cast<std::size_t>(grp)].push_back(shard_at(sys, setup, s, sc, first, host, params));
    }
  }
  return s;
}

/// Worker r: async DiLoCo's rounds against its group's local server.
actors::worker_config halos_worker(const topology_setup& setup, const models::dataset& data, const halos_servers& s,
                                   int group, int r, const caf::actor& report_to) {
  auto wc = base_worker(setup, data, r, report_to);
  wc.ps.sync = false;
  wc.ps.local_steps = setup.ps.local_steps;
  wc.ps.outer = true;
  wc.ps.push_pull = true;
  wc.ps.shards = setup.ps.shards;
  wc.ps.handles = s.local[static_cast<std::size_t>(group)];
  wc.ps.ranges = s.ranges;
  return wc;
}

/// The global parameters into `out`, and the workers' staleness at their
/// local servers; what went wrong, naming the shard, or "".
std::string collect(caf::actor_system& sys, caf::scoped_actor& self, const topology_setup& setup,
                    const halos_servers& s, topology_outcome& out);

/// Across processes, the epoch of the ranks' barrier after rank 0 has
/// read every local server (on any rank).
constexpr int servers_read = 2;

topology_outcome run_halos_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                                  const progress_fn& on_progress, const metrics_fn& on_metrics,
                                  const std::atomic<bool>* stop) {
  check(setup.ps.local_steps >= 1, "HALoS needs topology.local_steps of 1 or more");
  const auto group_of = groups_of(setup);
  check(static_cast<int>(group_of.size()) == setup.workers, "HALoS: a group for each of the workers");
  execution ex(sys, setup);
  models::model initial(setup.spec, kernels::device::cpu(), setup.seed);
  auto servers = spawn_servers(sys, setup, initial, group_of);
  stop_on_throw guard(sys);
  if (!setup.sim)
    guard.add(servers.own);
  for (int r : ex.ranks()) {
    const int g = group_of[static_cast<std::size_t>(r)];
    ex.add_worker(r, actors::spawn_worker(sys, halos_worker(setup, data, servers, g, r, ex.report_to())));
  }
  ex.wire([](caf::scoped_actor&, int, const std::vector<caf::actor>&) {}); // workers start on their own
  auto& self = ex.self();
  auto got = ex.coordinate(on_progress, on_metrics, stop);
  if (!got) { // not rank 0: its worker is done, its local servers are kept until rank 0 has read them
    setup.sync_ranks(servers_read);
    stop_actors(self, servers.own);
    return {};
  }
  auto c = std::move(*got);
  if (!c.failure.empty()) {
    end_here(self, setup, servers.own);
    throw error("HALoS: " + c.failure);
  }
  topology_outcome out;
  const auto failure = collect(sys, self, setup, servers, out);
  if (setup.node)
    setup.sync_ranks(servers_read); // the other ranks may let their local servers go
  end_here(self, setup, servers.own);
  ex.finish();
  check(failure.empty(), "HALoS: " + failure);
  take_coordination(out, std::move(c));
  return out;
}

std::string collect(caf::actor_system& sys, caf::scoped_actor& self, const topology_setup& setup,
                    const halos_servers& s, topology_outcome& out) {
  auto failure = fetch_params(sys, self, setup, s.global, s.ranges, s.ranges.back().second, out.params, "global shard");
  for (const auto& group : s.local) {
    auto stats = add_shard_stats(sys, self, setup, group, out, "local shard");
    failure = failure.empty() ? stats : failure;
  }
  return failure;
}

std::string halos_mode(const topology_setup&) { return "halos"; }
std::string halos_describe(const topology_setup& s) {
  const auto g = groups_of(s);
  return fmt::format("HALoS, {} group(s) with a local server each, every {} steps a worker's pseudo-gradient to its "
                     "local server (lr {}, momentum {}), every {} of those the local progress to the global server "
                     "(lr {}, momentum {}), merged with alpha {}",
                     *std::max_element(g.begin(), g.end()) + 1, s.ps.local_steps, s.halos.local_lr,
                     s.halos.local_momentum, s.halos.exchange_every, s.halos.global_lr, s.halos.global_momentum,
                     s.halos.merge_alpha);
}

} // namespace

const topology_family halos_family{
  "halos",
  /*order=*/6,
  "HALoS: hierarchical async local SGD, a local parameter server per group (topology.group_size, 0: by host) and a "
  "global one, exchanging every topology.halos.exchange_every pushes ([topology.halos])",
  /*has_shards=*/true,
  /*peers_talk=*/false,
  /*has_groups=*/true,
  /*takes_local_steps=*/true,
  /*splits_batch=*/false,
  /*sums_buckets=*/false,
  /*survives_kill=*/false,
  run_halos_wiring,
  never,
  always,
  always,
  every_step,
  halos_mode,
  halos_describe,
};
GRADWIRE_REGISTER_FAMILY(halos_family);

} // namespace gradwire::scheduler
