/// @file ring_wiring.cpp
/// The ring and hierarchical allreduce wirings: N workers exchange gradient
/// buckets by ring allreduce. Flat and without overlap, the workers run
/// the ring themselves; with overlap, or hierarchical (a ring in each
/// group, of group_size or by host, then a ring of the group leaders), a ring peer
/// actor per worker moves chunks while its worker computes. In one process
/// every actor is here; across processes one worker (and its peer) per
/// process, its neighbours proxies.

#include "actors/collective_peer.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/ring_allreduce.hpp"
#include "actors/ring_peer.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/runtime/execution.hpp"
#include "scheduler/runtime/ring_wiring.hpp"
#include "scheduler/runtime/virtual_reform.hpp"

#include <fmt/format.h>

namespace gradwire::scheduler {

namespace {

/// What every rank of a ring wiring agrees on.
struct ring_plan {
  const topology_setup& setup;
  const models::dataset& data;
  bool hier = false;
  bool use_peers = false; ///< peer actors move the chunks (overlap, hierarchical)
  /// Across processes: each worker's peer sums its buckets through the
  /// job's collective communicator (setup.comm), not a ring of actors.
  bool collective = false;
  /// compression.kind: every worker sends its compressed gradient to
  /// every other (actors::spawn_compressed_worker), no ring of chunks.
  bool compressed = false;
  actors::ring_groups groups; ///< hierarchical: every worker's group; empty: flat
  std::vector<std::pair<std::size_t, std::size_t>> buckets; ///< [begin, end) of each gradient bucket
  std::vector<int> batches; ///< every worker's batch, by rank (speed balancing starts from them)
  double total_batch = 0;

  ring_plan(const topology_setup& s, const models::dataset& d, std::size_t size)
      : setup(s), data(d), hier(s.family == &hierarchical_family),
        use_peers(s.compress.mode == models::compress_mode::none && (hier || s.ring.overlap || (s.node && s.comm))),
        collective(use_peers && s.node && s.comm), compressed(s.compress.mode != models::compress_mode::none),
        groups(!hier                      ? actors::ring_groups{}
               : !s.ring.group_of.empty() ? s.ring.group_of
                                          : actors::consecutive_groups(s.workers, s.ring.group_size)),
        buckets(actors::make_buckets(size, s.ring.bucket_floats_for(s.comm != nullptr))) {
    for (int r = 0; r < s.workers; ++r) {
      const auto ri = static_cast<std::size_t>(r);
      batches.push_back(ri < s.worker_batch.size() ? s.worker_batch[ri] : s.batch_size);
      total_batch += batches.back();
    }
  }

  actors::worker_config worker(int r, const caf::actor& report_to, const caf::actor& peer,
                               bool replacement = false) const {
    const int n = setup.workers;
    auto wc = base_worker(setup, data, r, report_to, replacement);
    wc.ring = setup.ring;
    wc.ring.peer = actors::as_reducer(peer);
    wc.ring.buckets = buckets;
    wc.ring.elastic = elastic().on;
    // Sample-weighted mean: worker r's gradient counts batch_r / mean batch.
    wc.ring.grad_weight = static_cast<float>(wc.batch_size * n / total_batch);
    if (n == 1)
      wc.ring.balance_every = 0; // no one to balance with
    if (wc.ring.balance_every > 0)
      wc.ring.balance_batches = batches;
    return wc;
  }

  std::string name() const {
    return hier ? "hierarchical allreduce" : compressed ? "compressed all-gather" : "ring allreduce";
  }

  caf::actor spawn_worker(caf::actor_system& sys, actors::worker_config wc) const {
    return compressed ? actors::spawn_compressed_worker(sys, std::move(wc)) : actors::spawn_ring_worker(sys, std::move(wc));
  }

  /// A flat ring of workers that run it themselves, all at one batch:
  /// survives lost workers (setup.min_workers > 0).
  elastic_plan elastic() const {
    bool equal = true;
    for (double b : batches)
      equal = equal && b == batches.front();
    elastic_plan e;
    e.min_workers = setup.min_workers;
    e.host_of = setup.rank_hosts;
    // Why the ring cannot re-form. With the sharded update each worker holds
    // the only optimizer state of the chunks it owns: a lost worker takes
    // its chunks' momentum with it (resume from a checkpoint instead).
    e.why_not = setup.min_workers == 0    ? "train.min_workers = 0"
                : compressed              ? "a compressed ring (compression.kind) does not re-form"
                : collective              ? "a ring summed by the collective communicator does not re-form "
                                            "(topology.ring.allreduce = \"actors\" does)"
                : use_peers               ? "a ring with peer actors (overlap, hierarchical) does not re-form"
                : setup.ring.sharded_update ? "with topology.ring.sharded_update each worker holds the only optimizer state of "
                                              "its chunks; set it to false for a ring that re-forms without a lost worker"
                : setup.ring.balance_every > 0 ? "a speed-balanced ring does not re-form"
                : !equal                  ? "workers of different batch sizes do not re-form"
                                          : "";
    e.on = e.why_not.empty() && setup.workers > 1;
    return e;
  }
};

/// Virtual time with kills: the reformer that re-forms the ring (and lets
/// replacements in) inside the simulation, placed on worker 0's host; null
/// without kills. A ring that cannot re-form is refused, saying why.
caf::actor virtual_reformer(caf::actor_system& sys, const ring_plan& p, const caf::actor& coordinator) {
  const auto& setup = p.setup;
  if (!setup.sim || std::none_of(setup.faults.begin(), setup.faults.end(),
                                 [](const fault_strike& f) { return f.kind == fault_kind::kill; }))
    return {};
  const auto e = p.elastic();
  check(e.on, "experiment.clock = \"virtual\" simulates a ring's kill where the ring re-forms without the lost "
              "worker, and this one does not: " + (e.why_not.empty() ? std::string("one worker") : e.why_not));
  virtual_reform_plan plan;
  for (int r = 0; r < setup.workers; ++r)
    plan.host_of.push_back(setup.sim->host_of_worker(r));
  plan.restarts = setup.restarts;
  plan.restart_s = setup.sim->setup().restart_s;
  plan.back_at_step = setup.back_at_step;
  plan.coordinator = coordinator;
  plan.clock = setup.sim;
  plan.respawn = [&sys, &p, coordinator](int r, const caf::actor& reformer) {
    auto wc = p.worker(r, coordinator, {}, true);
    wc.ring.reform_to = reformer;
    return place_here(p.setup, p.spawn_worker(sys, std::move(wc)), r, true);
  };
  auto handle = place_here(setup, spawn_virtual_reformer(sys, std::move(plan)), 0, false);
  setup.sim->set_reformer(handle);
  return handle;
}

/// Rank r's peer, spawned here: a ring peer (in virtual time on r's
/// clock), or across processes with a communicator, a collective peer.
caf::actor spawn_peer(caf::actor_system& sys, const ring_plan& p, int r) {
  const auto& setup = p.setup;
  if (p.collective) {
    actors::collective_peer_config cc;
    cc.rank = r;
    cc.buckets = p.buckets;
    cc.trace = setup.trace;
    cc.allreduce = [comm = setup.comm](float* buf, std::size_t n) { comm->allreduce(buf, n); };
    return caf::actor_cast<caf::actor>(actors::spawn_collective_peer(sys, std::move(cc)));
  }
  auto pc = actors::ring_peer_layout(r, setup.workers, p.buckets, setup.ring.chunk_floats, p.groups);
  pc.trace = setup.trace;
  pc.first_round = setup.resume ? setup.resume->step : 0;
  pc.vclock = setup.sim;
  return actors::spawn_ring_peer(sys, pc);
}

/// Tells ring peer r its neighbours: its right, its leader's right and
/// its group's members, as the others reach them.
void wire_peer(caf::scoped_actor& self, const ring_plan& p, execution& ex, int r) {
  const auto w = actors::ring_peer_wiring(r, p.setup.workers, p.groups);
  const auto at = [&ex](int m) { return ex.actor_of(m, transport::slots::ring_peer); };
  std::vector<caf::actor> members;
  for (int m : w.members)
    members.push_back(at(m));
  self->send(actors::as_ring_peer(at(r)), actors::peer_wire_atom::value, at(w.right), at(w.leader_right), members);
}

/// Every worker of the ring (and its peer) that runs in this process: all
/// of them in one process (in virtual time each placed on its worker's
/// host, every chunk through the link model), one across processes.
topology_outcome run_ring(caf::actor_system& sys, const ring_plan& p, const models::model& initial,
                          const progress_fn& on_progress, const metrics_fn& on_metrics,
                          const std::atomic<bool>* stop) {
  const auto& setup = p.setup;
  const int n = setup.workers;
  execution ex(sys, setup);
  if (p.use_peers)
    for (int r : ex.ranks())
      ex.add_actor(r, transport::slots::ring_peer, spawn_peer(sys, p, r));
  // The sharded update in one process: the replicas share one weight buffer
  // (ring_worker_options::shared_params), which starts as every replica would.
  const bool share = setup.ring.sharded_update && !p.use_peers && !p.compressed && n > 1 && !setup.distinct_init &&
                     !setup.node;
  const auto reformer = virtual_reformer(sys, p, ex.report_to());
  for (int r : ex.ranks()) {
    auto wc = p.worker(r, ex.report_to(), p.use_peers ? ex.actor_of(r, transport::slots::ring_peer) : caf::actor{});
    wc.ring.reform_to = reformer;
    if (share)
      wc.ring.shared_params = initial.params();
    ex.add_worker(r, p.spawn_worker(sys, std::move(wc)));
  }
  ex.wire([&](caf::scoped_actor& self, int r, const std::vector<caf::actor>& all) {
    if (p.use_peers && !p.collective)
      wire_peer(self, p, ex, r);
    self->send(actors::as_ring_wire_taker(all[static_cast<std::size_t>(r)]), actors::wire_atom::value,
               p.use_peers ? caf::actor{} : all[static_cast<std::size_t>((r + 1) % n)], all);
  });
  if (reformer)
    ex.self()->send(as_virtual_reformer(reformer), actors::wire_atom::value, ex.workers(), reformer);
  auto c = ex.coordinate(on_progress, on_metrics, stop, checkpoints_of(setup), p.elastic());
  if (p.collective) // a peer inside a sum waits for no one now (a rank lost, the run failed)
    setup.comm->abort("the run is over on rank " + std::to_string(setup.node->rank()));
  ex.finish();
  if (!c)
    return {};
  if (!c->failure.empty())
    throw error(p.name() + (setup.node ? " across processes: " : ": ") + c->failure);
  return replicas_outcome(std::move(*c), true);
}

topology_outcome run_ring_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                                 const progress_fn& on_progress, const metrics_fn& on_metrics,
                                 const std::atomic<bool>* stop) {
  check(setup.family != &hierarchical_family || setup.ring.group_size >= 1 || !setup.ring.group_of.empty(),
        "topology.group_size must be at least 1");
  check(setup.ring.chunk_floats > 0, "topology.ring.chunk_kb must be positive");
  const models::model initial(setup.spec, kernels::device::cpu(), setup.seed);
  const ring_plan plan(setup, data, initial.size());
  return run_ring(sys, plan, initial, on_progress, on_metrics, stop);
}

std::string balanced_text(const actors::ring_options& ring) {
  return ring.balance_every > 0 ? fmt::format(", batches balanced every {} steps", ring.balance_every) : "";
}

std::string ring_mode(const topology_setup&) { return "ring"; }
std::string ring_describe(const topology_setup& s) {
  const auto& z = s.compress;
  if (z.mode != models::compress_mode::none) {
    const auto how = z.mode == models::compress_mode::powersgd ? fmt::format(" rank {}", z.rank)
                     : z.mode == models::compress_mode::topk || z.mode == models::compress_mode::randk
                       ? fmt::format(" {:g}%", 100 * z.ratio)
                       : std::string();
    return fmt::format("compressed all-gather of gradients: {}{}, {}", models::compress_name(z.mode), how,
                       z.error_feedback ? "error feedback" : "no error feedback");
  }
  return fmt::format("ring allreduce, {} KiB buckets{}{}{}", s.ring.bucket_floats_for(s.comm != nullptr) / 256,
                     s.ring.overlap ? ", overlapped" : "", s.ring.wire_bf16 ? ", bf16 chunks" : "",
                     balanced_text(s.ring));
}

std::string hierarchical_mode(const topology_setup&) { return "hierarchical"; }
std::string hierarchical_describe(const topology_setup& s) {
  return s.by_host ? fmt::format("hierarchical allreduce, groups by host{}", balanced_text(s.ring))
                   : fmt::format("hierarchical allreduce, groups of {}{}", s.ring.group_size, balanced_text(s.ring));
}

} // namespace

const topology_family ring_family{
  "ring",
  /*order=*/3,
  "ring allreduce of gradient buckets",
  /*has_shards=*/false,
  /*peers_talk=*/true,
  /*has_groups=*/false,
  /*takes_local_steps=*/false,
  /*splits_batch=*/true,
  /*sums_buckets=*/true,
  /*survives_kill=*/true,
  run_ring_wiring,
  always,
  never,
  never,
  every_step,
  ring_mode,
  ring_describe,
};
GRADWIRE_REGISTER_FAMILY(ring_family);

const topology_family hierarchical_family{
  "hierarchical",
  /*order=*/4,
  "ring allreduce within groups (topology.group_size, or by host), then across the group leaders",
  /*has_shards=*/false,
  /*peers_talk=*/true,
  /*has_groups=*/true,
  /*takes_local_steps=*/false,
  /*splits_batch=*/true,
  /*sums_buckets=*/true,
  /*survives_kill=*/false,
  run_ring_wiring,
  always,
  never,
  never,
  every_step,
  hierarchical_mode,
  hierarchical_describe,
};
GRADWIRE_REGISTER_FAMILY(hierarchical_family);

} // namespace gradwire::scheduler
