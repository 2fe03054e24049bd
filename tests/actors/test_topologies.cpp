// Training through every topology as CAF actors in one process: the sync
// ring's equality with one joint batch, speed balancing, backup workers,
// DC-ASGD, every topology learning, BatchNorm statistics,
// the GPU worker's path and the sharded update.
#include "models/dataset.hpp"
#include "reference.hpp"
#include "scheduler/app/step_breakdown.hpp"
#include "topology_support.hpp"
#include "virtual_support.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ps_wiring.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <numeric>
#include <set>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;
using scheduler::topology_setup;


TEST_CASE("sync ring: N workers at batch b equal one worker at batch N*b, step by step") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 21);
  struct variant {
    const scheduler::topology_family* kind;
    int workers;
    bool overlap;
    int group;
  };
  for (const auto& v : {variant{&scheduler::ring_family, 1, false, 0}, variant{&scheduler::ring_family, 2, false, 0},
                        variant{&scheduler::ring_family, 3, false, 0}, variant{&scheduler::ring_family, 3, true, 0},
                        variant{&scheduler::hierarchical_family, 4, false, 2},
                        variant{&scheduler::hierarchical_family, 5, true, 2}}) {
    INFO("workers " << v.workers << (v.overlap ? ", overlap" : "") << (v.group ? ", hierarchical" : ""));
    auto setup = small_setup(v.workers, 1, true);
    setup.family = v.kind;
    setup.ring.overlap = v.overlap;
    setup.ring.group_size = v.group;
    setup.ring.bucket_floats = 4000; // several buckets (the model has 25,450 parameters) ...
    setup.ring.chunk_floats = 333;   // ... each cut into many chunks
    auto out = scheduler::run_topology(*env.sys, setup, data);
    gwtest::check_close(out.params, joint_batch_reference(setup, data), 1e-4, 1e-5);
    CHECK(out.replica_spread == 0.0); // every replica applied the same pieces
    for (const auto& rep : out.reports) {
      CHECK(rep.error.empty());
      CHECK(rep.steps == setup.steps);
    }
  }
}

TEST_CASE("sync ring with unequal batch sizes equals one batch of all their samples") {
  actor_env env;
  auto setup = small_setup(3, 1, true);
  setup.family = &scheduler::ring_family;
  setup.worker_batch = {8, 16, 24};
  // 1,024 samples, then 200: shards of 66-67, so the batch of 24 meets the
  // end of its epoch at step 3 (a partial batch of 18 skipped) and the
  // others later; the reference must take its batches as the workers do.
  for (int samples : {1024, 200}) {
    INFO(samples << " samples");
    auto data = make_synthetic(samples, 1, 28, 28, 10, 22);
    auto out = scheduler::run_topology(*env.sys, setup, data);
    gwtest::check_close(out.params, joint_batch_reference(setup, data), 1e-4, 1e-5);
  }
}

TEST_CASE("speed balancing: the slow worker's share shrinks, the global batch stays, the model is the joint batch's") {
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 24);
  struct variant {
    const scheduler::topology_family* kind;
    int workers;
    bool overlap;
  };
  for (const auto& v : {variant{&scheduler::ring_family, 2, false}, variant{&scheduler::ring_family, 3, true},
                        variant{&scheduler::hierarchical_family, 4, false}}) {
    INFO("workers " << v.workers << (v.overlap ? ", overlap" : "")
                    << (v.kind == &scheduler::hierarchical_family ? ", hierarchical" : ""));
    auto setup = small_setup(v.workers, 1, true);
    setup.family = v.kind;
    setup.ring.overlap = v.overlap;
    setup.ring.group_size = 2;
    setup.steps = 16;
    setup.ring.balance_every = 2;
    // The last worker spends 60 ms more on every step than the others (well more
    // than a loaded machine's scheduling delays the others by: with 25 ms, a
    // fast worker of 3 on 2 cores beside another test once looked as slow).
    setup.worker_delay_ms.assign(static_cast<std::size_t>(v.workers), 0.0);
    setup.worker_delay_ms.back() = 60.0;
    auto out = scheduler::run_topology(*env.sys, setup, data);
    std::vector<std::vector<int>> batches;
    for (const auto& rep : out.reports) {
      REQUIRE(rep.error.empty());
      REQUIRE(rep.batches.size() == static_cast<std::size_t>(setup.steps));
      CHECK(rep.batches.front() == setup.batch_size); // the first split is the configured one
      batches.push_back(rep.batches);
    }
    const int total = setup.batch_size * v.workers;
    for (std::size_t k = 0; k < static_cast<std::size_t>(setup.steps); ++k) {
      int sum = 0;
      for (const auto& b : batches)
        sum += b[k];
      CHECK(sum == total);
    }
    // The slow worker's share, after 6 re-splits, is the smallest and went
    // to the others (whose own split follows their scheduling on a loaded
    // machine: no one of them is sure to grow, and under ASan beside
    // another test one fast worker of 4 was once held up long enough to
    // end at the floor beside the slow one; the rule's convergence is
    // claimed exactly in virtual time, test_virtual_time).
    int others = 0;
    for (std::size_t r = 0; r + 1 < batches.size(); ++r) {
      CHECK(batches[r].back() >= batches.back().back());
      others += batches[r].back();
    }
    CHECK(batches.back().back() < setup.batch_size / 2);
    CHECK(others > setup.batch_size * (v.workers - 1));
    CHECK(out.replica_spread == 0.0);
    gwtest::check_close(out.params, joint_batch_reference(setup, data, batches), 1e-4, 1e-5);
  }
}

TEST_CASE("step breakdown: a worker 8 ms slower per step shows as imbalance in sync ring and sync PS") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 25);
  for (const auto kind : {&scheduler::ring_family, &scheduler::parameter_server_family}) {
    INFO((kind == &scheduler::ring_family ? "ring" : "sync PS"));
    auto setup = small_setup(2, 1, true);
    setup.family = kind;
    setup.steps = 12;
    setup.worker_delay_ms = {0.0, 8.0};
    auto out = scheduler::run_topology(*env.sys, setup, data);
    for (const auto& rep : out.reports) {
      REQUIRE(rep.error.empty());
      REQUIRE(rep.step_compute_ms.size() == static_cast<std::size_t>(setup.steps));
      double sum_ms = 0;
      for (float ms : rep.step_compute_ms)
        sum_ms += ms;
      CHECK(sum_ms == Approx(rep.compute_seconds * 1e3).epsilon(1e-3)); // every step's compute, all of it
      if (rep.rank == 1)
        for (float ms : rep.step_compute_ms)
          CHECK(ms >= 8.0f); // the delay is part of the slow worker's compute
    }
    const auto b = scheduler::breakdown_of(out.reports);
    REQUIRE(b.steps == setup.steps);
    CHECK(b.compute + b.imbalance + b.exchange == Approx(1.0));
    // The fast worker waits ~8 ms a step, the mean worker ~4 ms: at least
    // 2 ms a step of the mean wall time is imbalance, however loaded the
    // machine. (Not a share of the wall time: under TSan, or on a loaded
    // machine, compute grows and the same 4 ms is a smaller share; 0.147
    // against a bound of 0.15 failed CI once.)
    double wall = 0;
    for (const auto& rep : out.reports)
      wall += rep.seconds / 2;
    CHECK(b.imbalance * wall >= 2e-3 * setup.steps);
  }
}

TEST_CASE("backup workers: the slowest worker's pushes are dropped, N - b applied per step") {
  actor_env env;
  auto data = make_synthetic(4096, 1, 28, 28, 10, 23);
  auto setup = small_setup(3, 2, true);
  setup.spec.hidden = {256, 128}; // ~1 ms per step: the run outlasts the slow worker's first step
  setup.batch_size = 64;
  setup.ps.backup = 1;
  setup.steps = 250;
  // A fixed 150 ms per step (the fast ones take ~1 ms): far beyond the noise
  // of three threads sharing two cores with other tests (60 ms failed once
  // in a full ctest run on a VM whose host took half its CPU time).
  setup.worker_delay_ms = {0.0, 0.0, 150.0};
  auto out = scheduler::run_topology(*env.sys, setup, data);
  // Each shard applies exactly N - b = 2 pushes per version, all fresh.
  const auto applied = std::accumulate(out.staleness.begin(), out.staleness.end(), std::int64_t{0});
  CHECK(applied == 2 * setup.steps * setup.ps.shards);
  CHECK(out.staleness[0] == applied);
  INFO("dropped per rank: " << out.dropped[0] << ", " << out.dropped[1] << ", " << out.dropped[2]);
  for (int r = 0; r < 3; ++r)
    CHECK(out.dropped[r] == out.reports[r].dropped);
  // The fast two push once per version and shard, applied or dropped.
  for (int r = 0; r < 2; ++r)
    CHECK(static_cast<std::int64_t>(out.reports[r].staleness.size()) + out.reports[r].dropped ==
          setup.steps * setup.ps.shards);
  // Each version applies exactly two pushes, so every push of the slow
  // worker that was applied took a fast worker's place: an identity,
  // whatever the timing.
  CHECK(static_cast<std::int64_t>(out.reports[2].staleness.size()) == out.dropped[0] + out.dropped[1]);
  // The slow worker computes each batch on a version the fast two have
  // already moved past, so its pushes are the ones dropped (or, once the
  // shards reached the last version, ignored). A fast worker loses a race
  // only when the machine holds it back for more than the 150 ms: once in
  // 500 pushes in a TSan run beside another test (CI). A policy that did
  // not drop the last arrival would drop a third of each rank's pushes.
  CHECK(out.dropped[0] + out.dropped[1] <= 10);
  CHECK(out.reports[2].dropped >= 1);
  CHECK(out.reports[2].dropped > 10 * static_cast<std::int64_t>(out.reports[2].staleness.size()));
  for (const auto& rep : out.reports)
    CHECK(rep.error.empty());
  const auto [before, after] = losses(setup, out.params, data);
  CHECK(after < before);
}

TEST_CASE("DC-ASGD: delay-compensated async PS learns") {
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 24);
  auto setup = small_setup(4, 2, false);
  setup.steps = 40;
  setup.opt.momentum = 0.f;
  setup.ps.dc_lambda = 0.04f;
  auto out = scheduler::run_topology(*env.sys, setup, data);
  const auto [before, after] = losses(setup, out.params, data);
  INFO("loss before " << before << ", after " << after);
  // How stale each push is depends on the machine's scheduling (a slow
  // build, e.g. under ASan, makes the delays longer): the bound leaves room
  // for that. At 30 steps and half the loss it failed 1 run in 20 there.
  CHECK(after < 0.7 * before);
}

TEST_CASE("every topology learns Fashion-MNIST: loss falls and accuracy passes 75%") {
  actor_env env;
  const auto train = load_mnist_dir(fashion_mnist_default_dir, true, "fashion-mnist");
  const auto test = load_mnist_dir(fashion_mnist_default_dir, false, "fashion-mnist");
  struct variant {
    const char* name;
    const scheduler::topology_family* kind;
    bool sync;
    float momentum;
  };
  for (const auto& v : {variant{"sync PS, 1 backup", &scheduler::parameter_server_family, true, 0.9f},
                        variant{"async PS, DC-ASGD", &scheduler::parameter_server_family, false, 0.f},
                        variant{"local SGD", &scheduler::local_sgd_family, true, 0.9f},
                        variant{"ring", &scheduler::ring_family, true, 0.9f},
                        variant{"hierarchical", &scheduler::hierarchical_family, true, 0.9f},
                        variant{"D-PSGD", &scheduler::gossip_family, true, 0.9f}}) {
    INFO(v.name);
    auto setup = small_setup(4, 2, v.sync);
    setup.family = v.kind;
    setup.spec.hidden = {128};
    setup.opt.momentum = v.momentum;
    setup.batch_size = 32;
    setup.steps = 200; // 25,600 samples in all (150 left async PS at 0.77-0.80 under load: too close)
    setup.ps.backup = 1;
    setup.ps.dc_lambda = 0.04f;
    setup.ps.local_steps = v.kind == &scheduler::local_sgd_family ? 4 : 0; // local SGD is ps_options with local_steps
    setup.ring.group_size = 2;
    auto out = scheduler::run_topology(*env.sys, setup, train);
    model m(setup.spec, kernels::device::cpu(), setup.seed);
    std::copy(out.params.begin(), out.params.end(), m.params().data());
    trainer t(m, setup.opt, 1);
    const auto acc = t.evaluate(test, 2000).accuracy;
    const auto [before, after] = losses(setup, out.params, train);
    INFO("loss " << before << " -> " << after << ", test accuracy " << acc);
    CHECK(after < 0.5 * before);
    CHECK(acc > 0.75);
  }
}

TEST_CASE("BatchNorm statistics come back with every worker's report, as trained") {
  actor_env env;
  auto data = make_synthetic(128, 3, 32, 32, 10, 5);
  for (auto kind : {&scheduler::ring_family, &scheduler::parameter_server_family}) {
    auto setup = small_setup(2, 1, true);
    setup.family = kind;
    setup.spec.kind = "resnet20";
    setup.spec.channels = 3;
    setup.spec.height = setup.spec.width = 32;
    setup.batch_size = 8;
    setup.steps = 2;
    auto out = scheduler::run_topology(*env.sys, setup, data);
    model fresh(setup.spec, kernels::device::cpu(), setup.seed);
    REQUIRE(fresh.state().numel() > 0);
    const auto initial = fresh.state().to_vector();
    REQUIRE(out.reports.size() == 2);
    for (const auto& r : out.reports) {
      REQUIRE(r.state.defined());
      CHECK(r.state.numel() == fresh.state().numel());
      CHECK(r.state.to_vector() != initial); // the running statistics moved
    }
  }
}

TEST_CASE("a worker computing on its own second replica (a GPU worker's path) gives the same model") {
  actor_env env;
  auto data = make_synthetic(512, 1, 28, 28, 10, 3);
  for (auto kind : {&scheduler::ring_family, &scheduler::parameter_server_family, &scheduler::gossip_family}) {
    INFO(kind->name);
    auto setup = small_setup(2, 1, true);
    setup.family = kind;
    setup.steps = 6;
    auto direct = scheduler::run_topology(*env.sys, setup, data);
    setup.separate_compute = true; // parameters up, gradients down, every batch
    auto mirrored = scheduler::run_topology(*env.sys, setup, data);
    CHECK(mirrored.params == direct.params); // bit for bit
  }
  // With BatchNorm the statistics come down too.
  auto setup = small_setup(2, 1, true);
  setup.family = &scheduler::ring_family;
  setup.spec.kind = "resnet20";
  setup.spec.channels = 3;
  setup.spec.height = setup.spec.width = 32;
  setup.batch_size = 8;
  setup.steps = 2;
  auto cifar = make_synthetic(64, 3, 32, 32, 10, 4);
  auto direct = scheduler::run_topology(*env.sys, setup, cifar);
  setup.separate_compute = true;
  auto mirrored = scheduler::run_topology(*env.sys, setup, cifar);
  CHECK(mirrored.params == direct.params);
  REQUIRE(mirrored.reports.size() == 2);
  CHECK(mirrored.reports[0].state.to_vector() == direct.reports[0].state.to_vector());
}

TEST_CASE("sharded update: owners update their chunks and the ring gathers parameters, the same model bit for bit") {
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 9);
  for (int n : {1, 2, 3, 5}) {
    INFO(n << " workers");
    auto setup = small_setup(n, 1, true);
    setup.family = &scheduler::ring_family;
    setup.steps = 12;
    setup.ring.bucket_floats = 4096; // many buckets and chunks, sizes not divisible by n
    setup.ring.chunk_floats = 1000;
    setup.opt.weight_decay = 1e-3f;
    setup.ring.sharded_update = false;
    auto full = scheduler::run_topology(*env.sys, setup, data);
    setup.ring.sharded_update = true;
    auto sharded = scheduler::run_topology(*env.sys, setup, data);
    CHECK(sharded.params == full.params);
    CHECK(sharded.replica_spread == 0.0);
    setup.opt.kind = "adam"; // its step count advances once per step, not once per chunk
    setup.opt.lr = 0.001f;
    setup.ring.sharded_update = false;
    full = scheduler::run_topology(*env.sys, setup, data);
    setup.ring.sharded_update = true;
    sharded = scheduler::run_topology(*env.sys, setup, data);
    CHECK(sharded.params == full.params);
  }
}
