#include "actors/ring_allreduce.hpp"
#include "actors/ring_peer.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/runtime/topology_parts.hpp"

namespace gradwire::scheduler {

topology_outcome run_ring_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                                 const progress_fn& on_progress, const metrics_fn& on_metrics,
                                 const std::atomic<bool>* stop) {
  const bool hier = setup.kind == topology_kind::hierarchical;
  const int n = setup.workers;
  check(!hier || setup.group_size >= 1, "topology.group_size must be at least 1");
  check(setup.chunk_floats > 0 && setup.bucket_floats > 0, "topology.bucket_kb and topology.chunk_kb must be positive");
  const models::model initial(setup.spec, kernels::device::cpu(), setup.seed);
  const std::size_t size = initial.size();
  const auto buckets = actors::make_buckets(size, setup.bucket_floats);
  // Without overlap (and flat) the workers run the ring themselves; with
  // it, a peer actor per worker moves chunks while its worker computes.
  const bool use_peers = hier || setup.overlap;
  const int group_size = hier ? setup.group_size : 0;
  // Every worker's batch, by rank (speed balancing starts from them).
  // Sample-weighted mean: worker r's gradient counts batch_r / mean batch.
  std::vector<int> batches;
  double total_batch = 0;
  for (int r = 0; r < n; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    batches.push_back(ri < setup.worker_batch.size() ? setup.worker_batch[ri] : setup.batch_size);
    total_batch += batches.back();
  }
  auto config_of = [&](int r, const caf::actor& report_to, const caf::actor& peer) {
    auto wc = base_worker(setup, data, r, report_to);
    wc.ring_peer = peer;
    wc.buckets = buckets;
    wc.chunk_floats = setup.chunk_floats;
    wc.overlap = setup.overlap;
    wc.grad_weight = static_cast<float>(wc.batch_size * n / total_batch);
    if (setup.balance_every > 0 && n > 1) {
      wc.balance_every = setup.balance_every;
      wc.balance_batches = batches;
    }
    return wc;
  };
  if (setup.node) { // across processes: this process's worker (and its peer); neighbours are proxies
    auto& nd = *setup.node;
    caf::actor peer;
    if (use_peers) {
      auto pc = actors::ring_peer_layout(nd.rank(), n, buckets, setup.chunk_floats, group_size);
      pc.trace = setup.trace;
      peer = actors::spawn_ring_peer(sys, pc);
      nd.publish(transport::slots::ring_peer, peer);
    }
    auto c = run_worker_across(
      sys, setup, [&](const caf::actor& to) { return actors::spawn_ring_worker(sys, config_of(nd.rank(), to, peer)); },
      [&](caf::scoped_actor& self, const caf::actor& local, const std::vector<caf::actor>& all) {
        if (use_peers) {
          auto w = actors::ring_peer_wiring(nd.rank(), n, group_size);
          auto at = [&](int r) { return r < 0 ? caf::actor{} : nd.remote(r, transport::slots::ring_peer); };
          std::vector<caf::actor> members;
          for (int m : w.members)
            members.push_back(at(m));
          self->send(peer, actors::wire_atom::value, at(w.right), at(w.leader_right), members);
        }
        self->send(local, actors::wire_atom::value, use_peers ? caf::actor{} : all[static_cast<std::size_t>((nd.rank() + 1) % n)],
                   all);
      },
      on_progress, on_metrics, stop);
    if (peer)
      caf::anon_send_exit(peer, caf::exit_reason::user_shutdown);
    if (!c)
      return {};
    if (!c->failure.empty())
      throw error(std::string(hier ? "hierarchical allreduce" : "ring allreduce") + " across processes: " + c->failure);
    return replicas_outcome(std::move(*c), true);
  }
  std::vector<caf::actor> peers;
  if (use_peers)
    peers = actors::spawn_ring_peers(sys, n, buckets, setup.chunk_floats, group_size, setup.trace);
  // The sharded update in one process: the replicas share one weight buffer
  // (worker_config::shared_params), which starts as every replica would.
  const bool share = setup.sharded_update && !use_peers && n > 1 && !setup.distinct_init;
  caf::scoped_actor self{sys};
  std::vector<caf::actor> workers;
  for (int r = 0; r < n; ++r) {
    auto wc = config_of(r, self, use_peers ? peers[static_cast<std::size_t>(r)] : caf::actor{});
    if (share)
      wc.shared_params = initial.params();
    workers.push_back(actors::spawn_ring_worker(sys, std::move(wc)));
  }
  for (int r = 0; r < n; ++r) // the ring is complete: start
    self->send(workers[static_cast<std::size_t>(r)], actors::wire_atom::value,
               use_peers ? caf::actor{} : workers[static_cast<std::size_t>((r + 1) % n)], workers);
  auto c = coordinate(self, workers, setup.timeout, on_progress, on_metrics, stop, false, setup.on_eval);
  stop_actors(self, workers);
  stop_actors(self, peers);
  if (!c.failure.empty())
    throw error(std::string(hier ? "hierarchical allreduce: " : "ring allreduce: ") + c.failure);
  return replicas_outcome(std::move(c), true);
}

} // namespace gradwire::scheduler
