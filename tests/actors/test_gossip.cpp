// Gossip as CAF actors in one process: D-PSGD's consensus on the mean on
// every graph (the one-peer exponential graph's exact average in log2 n
// steps), its bit-for-bit mixing order, and AD-PSGD's pairwise averaging
// with a slow worker.
#include "models/dataset.hpp"
#include "reference.hpp"
#include "topology_support.hpp"
#include "virtual_support.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;
using scheduler::topology_setup;

namespace {

/// Spread of replicas initialised from seeds seed + 1000003 r, as the
/// gossip workers with distinct_init start; and their mean.
std::pair<double, std::vector<double>> initial_spread(const topology_setup& s) {
  std::vector<std::vector<float>> reps;
  for (int r = 0; r < s.workers; ++r)
    reps.push_back(model(s.spec, kernels::device::cpu(), s.seed + 1000003ULL * static_cast<std::uint64_t>(r))
                     .params()
                     .to_vector());
  std::vector<double> mean(reps[0].size(), 0.0);
  for (const auto& p : reps)
    for (std::size_t k = 0; k < p.size(); ++k)
      mean[k] += p[k] / static_cast<double>(reps.size());
  double norm = 0, worst = 0;
  for (double v : mean)
    norm += v * v;
  for (const auto& p : reps) {
    double d = 0;
    for (std::size_t k = 0; k < p.size(); ++k)
      d += (p[k] - mean[k]) * (p[k] - mean[k]);
    worst = std::max(worst, std::sqrt(d / norm));
  }
  return {worst, mean};
}

/// Gossip among `workers` replicas from different starts, averaging only
/// (lr 0: x <- W x, W doubly stochastic), for `steps` steps on `graph`.
topology_setup averaging_setup(int workers, const std::string& graph, std::int64_t steps) {
  auto setup = small_setup(workers, 1, true);
  setup.family = &scheduler::gossip_family;
  setup.gossip.graph = graph;
  setup.distinct_init = true;
  setup.opt.lr = 0.f;
  setup.opt.momentum = 0.f;
  setup.steps = steps;
  return setup;
}

} // namespace

TEST_CASE("D-PSGD: replicas from different starts reach consensus on their mean") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 25);
  for (const std::string graph : {"ring", "torus", "random", "complete"}) {
    INFO(graph);
    const auto setup = averaging_setup(6, graph, 40);
    const auto [spread0, mean0] = initial_spread(setup);
    auto out = scheduler::run_topology(*env.sys, setup, data);
    INFO("spread " << spread0 << " -> " << out.replica_spread);
    CHECK(out.replica_spread < 1e-2 * spread0);
    // The mean is preserved (columns of W sum to one).
    gwtest::check_close(out.params, std::vector<float>(mean0.begin(), mean0.end()), 1e-4, 1e-5);
  }
}

TEST_CASE("D-PSGD on a complete graph of 4 gives the same model bit for bit whatever order neighbours arrive in") {
  // Each worker mixes three neighbours' parameters: a float sum of that
  // many terms depends on its order, so the mix adds them in graph order.
  // Each worker in turn is slowed, so its parameters arrive last.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 27);
  auto setup = small_setup(4, 1, true);
  setup.family = &scheduler::gossip_family;
  setup.gossip.graph = "complete";
  setup.steps = 12;
  std::vector<std::vector<float>> models;
  for (int slow = -1; slow < 4; ++slow) {
    setup.worker_delay_ms.assign(4, 0.0);
    if (slow >= 0)
      setup.worker_delay_ms[static_cast<std::size_t>(slow)] = 4.0;
    models.push_back(scheduler::run_topology(*env.sys, setup, data).params);
  }
  for (std::size_t k = 1; k < models.size(); ++k) {
    INFO("worker " << k - 1 << " slowed");
    CHECK(models[k] == models[0]);
  }
}

TEST_CASE("AD-PSGD: pairwise averaging shrinks the spread, and it learns") {
  // How far the replicas come together depends on when each averages and
  // when each finishes (a closed worker averages no more), so the shrink
  // is claimed in virtual time, where that schedule is fixed: one worker a
  // straggler, every run the same. In real time any schedule shrinks it.
  auto data = make_synthetic(2048, 1, 28, 28, 10, 26);
  auto setup = averaging_setup(4, "ring", 40);
  setup.gossip.mode = actors::gossip_mode::adpsgd;
  const auto spread0 = initial_spread(setup).first;
  auto vs = constant_compute(1e-3, 4, 1);
  vs.compute[0].dist = scheduler::compute_model::shape::straggler;
  vs.compute[0].straggler_p = 0.3;
  vs.compute[0].straggler_k = 4;
  const auto virt = run_virtual(setup, data, vs);
  INFO("virtual time: spread " << spread0 << " -> " << virt.replica_spread);
  CHECK(virt.replica_spread < 0.1 * spread0);
  actor_env env;
  auto still = scheduler::run_topology(*env.sys, setup, data);
  INFO("real time: spread " << spread0 << " -> " << still.replica_spread);
  CHECK(still.replica_spread < spread0);
  setup.distinct_init = false;
  setup.opt.lr = 0.05f;
  auto out = scheduler::run_topology(*env.sys, setup, data);
  const auto [before, after] = losses(setup, out.params, data);
  INFO("loss before " << before << ", after " << after);
  CHECK(after < 0.5 * before);
}

TEST_CASE("AD-PSGD: a slow worker holds up no one, the fast finish while it is on its first steps") {
  // Counted in steps, not seconds: in the order the coordinator hears of
  // them, how many steps the slow worker had done when both fast ones
  // reported their last. A fast worker that waited on the slow one's step
  // whenever it picked it (one step in two) would have had the slow one at
  // about half its steps by then; unhindered, the slow one is on its first
  // few. Its extra delay is large against a fast step even on a loaded
  // machine under a sanitizer, so the margin holds there too.
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 27);
  auto setup = small_setup(3, 1, true);
  setup.family = &scheduler::gossip_family;
  setup.gossip.mode = actors::gossip_mode::adpsgd;
  setup.steps = 40;
  setup.log_every = 1;
  setup.worker_delay_ms = {0.0, 0.0, 40.0};
  std::mutex mu;
  std::vector<std::pair<int, std::int64_t>> heard; // (rank, steps done), in arrival order
  auto out = scheduler::run_topology(*env.sys, setup, data, {}, [&](const actors::step_metrics& m) {
    std::lock_guard<std::mutex> lk(mu);
    heard.emplace_back(m.rank, m.step);
  });
  std::int64_t slow_steps = 0;
  int fast_done = 0;
  for (const auto& [rank, step] : heard) {
    if (rank == 2)
      slow_steps = std::max(slow_steps, step);
    else if (step == setup.steps && ++fast_done == 2)
      break;
  }
  INFO("the slow worker had done " << slow_steps << " of " << setup.steps << " steps when the fast ones finished");
  CHECK(fast_done == 2);
  CHECK(slow_steps < setup.steps / 4);
  for (const auto& rep : out.reports) { // and every worker did all its steps
    CHECK(rep.error.empty());
    CHECK(rep.steps == setup.steps);
  }
}

TEST_CASE("D-PSGD on the one-peer exponential graph of 8 averages exactly in 3 steps, where a ring does not") {
  // Ying et al. 2021: one peer a step, at distance 2^(t mod 3); weights 1/2.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 29);
  auto setup = averaging_setup(8, "exponential", 3);
  const auto [spread0, mean0] = initial_spread(setup);
  const auto out = scheduler::run_topology(*env.sys, setup, data);
  INFO("spread " << spread0 << " -> " << out.replica_spread);
  CHECK(out.replica_spread < 1e-6 * spread0);
  gwtest::check_close(out.params, std::vector<float>(mean0.begin(), mean0.end()), 1e-5, 1e-6);
  setup.gossip.graph = "ring";
  const auto ring = scheduler::run_topology(*env.sys, setup, data);
  INFO("ring: spread " << spread0 << " -> " << ring.replica_spread);
  CHECK(ring.replica_spread > 0.1 * spread0);
}

TEST_CASE("D-PSGD on random graphs redrawn every step: consensus on the mean, the same bits whatever the arrival order") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 29);
  auto setup = averaging_setup(6, "random", 40);
  setup.gossip.degree = 3; // a ring plus a random edge a worker or more, redrawn every step
  setup.gossip.graph_seed = 7;
  const auto [spread0, mean0] = initial_spread(setup);
  const auto redrawn = scheduler::run_topology(*env.sys, setup, data);
  INFO("spread " << spread0 << " -> " << redrawn.replica_spread);
  CHECK(redrawn.replica_spread < 1e-2 * spread0);
  gwtest::check_close(redrawn.params, std::vector<float>(mean0.begin(), mean0.end()), 1e-4, 1e-5);
  auto fixed = setup;
  fixed.gossip.graph_seed = 0;
  // The graphs did change: after 5 steps, the same mean reached another way.
  fixed.steps = 5;
  auto early = setup;
  early.steps = 5;
  CHECK(scheduler::run_topology(*env.sys, fixed, data).replica_spread !=
        scheduler::run_topology(*env.sys, early, data).replica_spread);
  setup.opt.lr = 0.05f; // training: each worker slowed in turn, its parameters arriving last
  setup.steps = 12;
  std::vector<std::vector<float>> models;
  for (int slow = -1; slow < 6; slow += 2) {
    setup.worker_delay_ms.assign(6, 0.0);
    if (slow >= 0)
      setup.worker_delay_ms[static_cast<std::size_t>(slow)] = 4.0;
    models.push_back(scheduler::run_topology(*env.sys, setup, data).params);
  }
  for (std::size_t k = 1; k < models.size(); ++k)
    CHECK(models[k] == models[0]);
}

TEST_CASE("every step's random graph is the same on every worker, symmetric, and changes with the step") {
  const auto a = actors::graph_of_step(16, 3, 5, 10), b = actors::graph_of_step(16, 3, 5, 10),
             c = actors::graph_of_step(16, 3, 5, 11);
  CHECK(a == b);
  CHECK(a != c);
  for (int i = 0; i < 16; ++i)
    for (int j : a[static_cast<std::size_t>(i)]) {
      CHECK(j != i);
      const auto& back = a[static_cast<std::size_t>(j)];
      CHECK(std::find(back.begin(), back.end(), i) != back.end());
    }
}
