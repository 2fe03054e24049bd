#include "actors/ring_allreduce.hpp"
#include "actors/ring_peer.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/topology_parts.hpp"

namespace gradwire::scheduler {

namespace {

constexpr std::uint32_t coordinator_slot = 2, worker_slot = 10;

/// The flat ring across processes: this process runs worker `rank` (its
/// ring neighbours are proxies), rank 0 also coordinates. Rank 0 returns
/// the outcome of every worker; the others return once their worker is done.
topology_outcome run_ring_across(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                                 std::size_t size, const progress_fn& on_progress, const metrics_fn& on_metrics,
                                 const std::atomic<bool>* stop) {
  auto& nd = *setup.node;
  const int n = setup.workers, rank = nd.rank();
  check(n == nd.size(), "topology.workers = " + std::to_string(n) + " but the job has " + std::to_string(nd.size()) +
                          " processes: across processes each process runs one worker (set topology.workers = " +
                          std::to_string(nd.size()) + ")");
  check(setup.kind == topology_kind::ring && !setup.overlap,
        "across processes the ring runs flat and without topology.overlap for now");
  caf::scoped_actor self{sys};
  if (rank == 0)
    nd.publish(coordinator_slot, caf::actor_cast<caf::actor>(self));
  double total_batch = 0;
  for (int r = 0; r < n; ++r)
    total_batch += static_cast<std::size_t>(r) < setup.worker_batch.size() ? setup.worker_batch[static_cast<std::size_t>(r)]
                                                                            : setup.batch_size;
  auto wc = base_worker(setup, data, rank, rank == 0 ? caf::actor_cast<caf::actor>(self) : nd.remote(0, coordinator_slot));
  wc.buckets = actors::make_buckets(size, setup.bucket_floats);
  wc.chunk_floats = setup.chunk_floats;
  wc.grad_weight = static_cast<float>(wc.batch_size * n / total_batch);
  auto worker = actors::spawn_ring_worker(sys, wc);
  nd.publish(worker_slot, worker);
  if (setup.on_published)
    setup.on_published(); // every rank has published: frames find their actors
  self->send(worker, actors::wire_atom::value, nd.remote((rank + 1) % n, worker_slot));
  if (rank != 0) { // the worker reports to rank 0; wait for it to finish
    self->monitor(worker);
    bool done = false;
    while (!done)
      self->receive([&](caf::down_msg&) { done = true; },
                    caf::after(std::chrono::milliseconds(200)) >> [&] {
                      if (stop && stop->load())
                        self->send(worker, actors::done_atom::value);
                    });
    return {};
  }
  std::vector<caf::actor> workers{worker};
  for (int r = 1; r < n; ++r)
    workers.push_back(nd.remote(r, worker_slot));
  auto c = coordinate(self, workers, setup.timeout, on_progress, on_metrics, stop);
  stop_actors(self, {worker});
  if (!c.failure.empty())
    throw error("ring allreduce across processes: " + c.failure);
  return replicas_outcome(std::move(c), true);
}

} // namespace

topology_outcome run_ring_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                                 const progress_fn& on_progress, const metrics_fn& on_metrics,
                                 const std::atomic<bool>* stop) {
  const bool hier = setup.kind == topology_kind::hierarchical;
  const int n = setup.workers;
  check(!hier || setup.group_size >= 1, "topology.group_size must be at least 1");
  check(setup.chunk_floats > 0 && setup.bucket_floats > 0, "topology.bucket_kb and topology.chunk_kb must be positive");
  const std::size_t size = models::model(setup.spec, kernels::device::cpu(), setup.seed).size();
  if (setup.node)
    return run_ring_across(sys, setup, data, size, on_progress, on_metrics, stop);
  const auto buckets = actors::make_buckets(size, setup.bucket_floats);
  // Without overlap (and flat) the workers run the ring themselves; with
  // it, a peer actor per worker moves chunks while its worker computes.
  const bool use_peers = hier || setup.overlap;
  std::vector<caf::actor> peers;
  if (use_peers)
    peers = actors::spawn_ring_peers(sys, n, buckets, setup.chunk_floats, hier ? setup.group_size : 0);
  caf::scoped_actor self{sys};
  // Sample-weighted mean: worker r's gradient counts batch_r / mean batch.
  double total_batch = 0;
  for (int r = 0; r < n; ++r)
    total_batch += static_cast<std::size_t>(r) < setup.worker_batch.size() ? setup.worker_batch[static_cast<std::size_t>(r)]
                                                                            : setup.batch_size;
  std::vector<caf::actor> workers;
  for (int r = 0; r < n; ++r) {
    auto wc = base_worker(setup, data, r, self);
    if (use_peers)
      wc.ring_peer = peers[static_cast<std::size_t>(r)];
    wc.buckets = buckets;
    wc.chunk_floats = setup.chunk_floats;
    wc.overlap = setup.overlap;
    wc.grad_weight = static_cast<float>(wc.batch_size * n / total_batch);
    workers.push_back(actors::spawn_ring_worker(sys, wc));
  }
  for (int r = 0; r < n; ++r) // the ring is complete: start
    self->send(workers[static_cast<std::size_t>(r)], actors::wire_atom::value,
               use_peers ? caf::actor{} : workers[static_cast<std::size_t>((r + 1) % n)]);
  auto c = coordinate(self, workers, setup.timeout, on_progress, on_metrics, stop);
  stop_actors(self, workers);
  stop_actors(self, peers);
  if (!c.failure.empty())
    throw error(std::string(hier ? "hierarchical allreduce: " : "ring allreduce: ") + c.failure);
  return replicas_outcome(std::move(c), true);
}

} // namespace gradwire::scheduler
