#pragma once
// What the topology tests share: an actor system per test case, a small
// setup, and references to check topologies against.
#include "actor_env.hpp"
#include "actors/ps_shard.hpp"
#include "models/batcher.hpp"
#include "models/model.hpp"
#include "models/trainer.hpp"
#include "scheduler/runtime/topology.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <utility>
#include <vector>

namespace gwtest {

using namespace gradwire;

/// A shard `id` of 64 floats for one worker, sync or async, to drive by hand.
inline actors::shard_config one_worker_shard(int id, bool sync) {
  actors::shard_config sc;
  sc.id = id;
  sc.end = 64;
  sc.workers = 1;
  sc.ps.sync = sync;
  return sc;
}

/// A shard's version and parameters, asked for by `self`.
inline std::pair<std::int64_t, std::vector<float>> fetched(caf::scoped_actor& self, const actors::shard_actor& shard) {
  std::pair<std::int64_t, std::vector<float>> out{-1, {}};
  self->request(shard, std::chrono::seconds(10), actors::fetch_atom::value)
    .receive([&](std::int64_t v, const actors::slice& p) { out = {v, p.to_vector()}; },
             [&](caf::error& e) { FAIL(self->system().render(e)); });
  return out;
}

inline scheduler::topology_setup small_setup(int workers, int shards, bool sync) {
  scheduler::topology_setup s;
  s.spec.hidden = {32};
  s.opt.lr = 0.05f;
  s.opt.momentum = 0.9f;
  s.workers = workers;
  s.ps.shards = shards;
  s.ps.sync = sync;
  s.batch_size = 16;
  s.steps = 8;
  s.seed = 11;
  s.timeout = std::chrono::milliseconds(30000);
  return s;
}

/// Parameters of one trainer fed, each step, all workers' batches together
/// (each worker's data shard, batch size and shuffle seed as the workers use;
/// with `batches`, worker r's batch at step k is batches[r][k]).
inline std::vector<float> joint_batch_reference(const scheduler::topology_setup& setup, const models::dataset& data,
                                                const std::vector<std::vector<int>>& batches = {}) {
  models::model ref(setup.spec, gradwire::kernels::device::cpu(), setup.seed);
  models::trainer t(ref, setup.opt, 1);
  std::vector<std::unique_ptr<models::batcher>> feeds;
  for (int r = 0; r < setup.workers; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    feeds.push_back(std::make_unique<models::batcher>(
      data, models::shard_indices(data.size(), r, setup.workers, setup.seed),
      ri < setup.worker_batch.size() ? setup.worker_batch[ri] : setup.batch_size,
      setup.seed + static_cast<std::uint64_t>(r)));
  }
  for (int step = 0; step < setup.steps; ++step) {
    models::batch joint, part;
    for (std::size_t r = 0; r < feeds.size(); ++r) {
      auto& f = feeds[r];
      if (!batches.empty())
        f->set_batch_size(batches[r].at(static_cast<std::size_t>(step)));
      // As a worker takes its batch (worker_core::compute): a partial one
      // at the end of an epoch is skipped, and the next epoch begins (a
      // fast worker given large batches by speed balancing gets there).
      bool got = false;
      for (int tries = 0; tries < 3 && !got; ++tries)
        got = f->next(part) && part.size == f->batch_size();
      REQUIRE(got);
      joint.x.insert(joint.x.end(), part.x.begin(), part.x.end());
      joint.y.insert(joint.y.end(), part.y.begin(), part.y.end());
      joint.size += part.size;
    }
    t.step(joint.x.data(), joint.y.data(), joint.size);
  }
  return ref.params().to_vector();
}

/// Mean loss on (the first 1000 samples of) `data` of the initial model
/// and of `params`.
inline std::pair<double, double> losses(const scheduler::topology_setup& setup, const std::vector<float>& params,
                                 const models::dataset& data) {
  models::model before(setup.spec, gradwire::kernels::device::cpu(), setup.seed), after(setup.spec, gradwire::kernels::device::cpu(), setup.seed);
  std::copy(params.begin(), params.end(), after.params().data());
  models::trainer tb(before, setup.opt, 1), ta(after, setup.opt, 1);
  return {tb.evaluate(data, 1000).loss, ta.evaluate(data, 1000).loss};
}

inline double mean_staleness(const actors::histogram& h) {
  double n = 0, s = 0;
  for (std::size_t k = 0; k < h.size(); ++k) {
    n += static_cast<double>(h[k]);
    s += static_cast<double>(k) * static_cast<double>(h[k]);
  }
  return n > 0 ? s / n : 0;
}

} // namespace gwtest
