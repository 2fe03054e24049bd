#include "actors/worker.hpp"
#include "actors/worker_protocol.hpp"
#include "kernels/error.hpp"
#include "scheduler/runtime/execution.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace gradwire::scheduler {
namespace {

bool asynchronous(const topology_setup& s) { return s.gossip.mode == actors::gossip_mode::adpsgd; }

/// AD-PSGD: worker r's store records its events (experiment.record), or,
/// in a replay, follows the run's record of them and runs its steps.
void mix_record_or_replay(const topology_setup& setup, actors::worker_config& wc) {
  if (!asynchronous(setup) || wc.gossip.links.empty())
    return;
  const auto r = static_cast<std::size_t>(wc.rank);
  if (setup.replay) {
    check(r < setup.replay->mixers.size() && setup.replay->mixers[r],
          "replay: no AD-PSGD record of worker " + std::to_string(wc.rank) + " (" +
            std::to_string(setup.replay->mixers.size()) + " mixer records)");
    wc.gossip.replay = setup.replay->mixers[r];
    wc.steps = setup.replay->steps[r];
  }
  if (setup.record_dir.empty())
    return;
  std::filesystem::create_directories(setup.record_dir);
  wc.gossip.record_path = setup.record_dir + "/mixer-" + std::to_string(wc.rank) + ".gwr";
  wc.gossip.record_max_bytes = setup.record_max_bytes;
  wc.gossip.record_run = setup.run_id;
}

topology_outcome run_gossip_wiring(caf::actor_system& sys, const topology_setup& setup,
                                   const models::dataset& data, const progress_fn& on_progress,
                                   const metrics_fn& on_metrics, const std::atomic<bool>* stop) {
  const int n = setup.workers;
  const auto graph = gossip_graph(setup.gossip.graph, n, setup.gossip.degree, setup.seed);
  auto config_of = [&](int r, const caf::actor& report_to) {
    auto wc = base_worker(setup, data, r, report_to);
    wc.gossip = setup.gossip; // the options; the links and weights below
    wc.gossip.links = graph[static_cast<std::size_t>(r)];
    wc.gossip.mix_weights = actors::metropolis_weights(
      wc.gossip.links, [&graph](int j) { return graph[static_cast<std::size_t>(j)].size(); });
    if (setup.node || setup.sim)
      wc.gossip.whole_graph = graph; // a worker can be lost (a process, or a kill in virtual time): reweigh without it
    mix_record_or_replay(setup, wc);
    return wc;
  };
  // A lost worker (a process): its neighbours leave it out and re-weigh,
  // the survivors share out its data (no round to abandon: nothing is
  // redone). In virtual time the loop tells them of a kill.
  elastic_plan elastic;
  elastic.tell_survivors = true;
  elastic.min_workers = setup.min_workers;
  elastic.why_not = setup.gossip.graph == "exponential"
                      ? "topology.gossip.graph = \"exponential\" (its one-peer schedule needs every worker)"
                    : setup.min_workers == 0 ? "train.min_workers = 0"
                                             : "";
  elastic.on = elastic.why_not.empty() && n > 1 && setup.node != nullptr;
  execution ex(sys, setup);
  for (int r : ex.ranks())
    ex.add_worker(r, actors::spawn_gossip_worker(sys, config_of(r, ex.report_to())));
  ex.tell_on_kill();
  // Each worker starts once it knows every other's handle.
  ex.wire([](caf::scoped_actor& self, int r, const std::vector<caf::actor>& all) {
    self->send(actors::as_gossip_worker(all[static_cast<std::size_t>(r)]), actors::wire_atom::value, all);
  });
  auto c = ex.coordinate(on_progress, on_metrics, stop, checkpoints_of(setup), elastic);
  ex.finish();
  if (!c)
    return {};
  if (!c->failure.empty())
    throw error("gossip" + std::string(setup.node ? " across processes" : "") + ": " + c->failure);
  return replicas_outcome(std::move(*c), false);
}

std::string gossip_mode_name(const topology_setup& s) { return asynchronous(s) ? "adpsgd" : "dpsgd"; }
std::string gossip_describe(const topology_setup& s) {
  return fmt::format("gossip {} on a {} graph", asynchronous(s) ? "AD-PSGD" : "D-PSGD", s.gossip.graph);
}

} // namespace

const topology_family gossip_family{
  "gossip",
  /*order=*/5,
  "decentralised averaging with neighbours on a graph (topology.gossip.mode dpsgd or adpsgd)",
  /*has_shards=*/false,
  /*peers_talk=*/true,
  /*has_groups=*/false,
  /*takes_local_steps=*/false,
  /*splits_batch=*/false,
  /*sums_buckets=*/false,
  /*survives_kill=*/true,
  run_gossip_wiring,
  never,
  asynchronous,
  always,
  every_step,
  gossip_mode_name,
  gossip_describe,
};
GRADWIRE_REGISTER_FAMILY(gossip_family);

} // namespace gradwire::scheduler
