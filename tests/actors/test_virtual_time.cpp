// Virtual time: the parameter server's, the rings' and gossip's own actors under the
// discrete-event loop (scheduler/runtime/virtual_time.hpp). Determinism, the
// same model as in real time, and the laws a simulated clock must obey:
// async staleness N - 1, SSP's bound (the cost models' exact times:
// test_virtual_costs.cpp).
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "virtual_support.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ps_wiring.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <cstring>
#include <numeric>
#include <thread>

using namespace gradwire;
using namespace gwtest;
using models::make_synthetic;
using scheduler::compute_model;
using scheduler::topology_setup;
using scheduler::virtual_setup;

TEST_CASE("virtual time: the same config and seed give the same bits and staleness on a loaded machine") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 5);
  auto setup = small_setup(4, 2, false);
  setup.steps = 12;
  auto vs = constant_compute(2e-3, 2, 2);
  vs.compute[0].dist = compute_model::shape::lognormal;
  vs.compute[0].cv = 0.5;
  vs.link.latency_us = 20;
  vs.link.bandwidth_gbps = 10;
  vs.seed = 3;
  const auto a = run_virtual(setup, data, vs);
  // Again, with two threads spinning on this machine's cores.
  std::atomic<bool> busy{true};
  std::vector<std::thread> load;
  for (int i = 0; i < 2; ++i)
    load.emplace_back([&busy] {
      volatile double x = 0;
      while (busy.load(std::memory_order_relaxed))
        x = x + 1;
    });
  vs.threads = 2; // and with a helper thread computing gradients
  const auto b = run_virtual(setup, data, vs);
  busy = false;
  for (auto& t : load)
    t.join();
  CHECK(same_bits(a.params, b.params));
  CHECK(a.staleness == b.staleness);
  CHECK(a.seconds == b.seconds);
  for (std::size_t r = 0; r < a.reports.size(); ++r) {
    CHECK(a.reports[r].staleness == b.reports[r].staleness);
    CHECK(a.reports[r].error.empty());
  }
  // The lognormal steps make the order of pushes differ from round to round:
  // staleness is spread, not one value.
  CHECK(std::count_if(a.staleness.begin(), a.staleness.end(), [](std::int64_t n) { return n > 0; }) >= 3);
  // Another seed draws other step times: another interleaving, other bits.
  vs.seed = 4;
  const auto c = run_virtual(setup, data, vs);
  CHECK(!same_bits(a.params, c.params));
}

TEST_CASE("virtual time: homogeneous async push-pull staleness is N - 1 after the first round") {
  auto data = make_synthetic(4096, 1, 28, 28, 10, 6);
  for (int n : {16, 64, 256, 1024}) {
    INFO(n << " workers");
    const int steps = n >= 256 ? 3 : 6;
    const auto out = run_virtual(tiny_async(n, steps), data, constant_compute(1e-3, 1, n));
    for (const auto& rep : out.reports) {
      REQUIRE(rep.error.empty());
      REQUIRE(rep.staleness.size() == static_cast<std::size_t>(steps));
      // Round one: every worker computed on version 0, and the k-th push
      // applied is k versions stale. From then on each push finds the other
      // N - 1 workers' pushes applied since its worker's last reply.
      for (std::size_t k = 1; k < rep.staleness.size(); ++k)
        CHECK(rep.staleness[k] == n - 1);
    }
    REQUIRE(out.staleness.size() >= static_cast<std::size_t>(n));
    for (int s = 0; s < n - 1; ++s)
      CHECK(out.staleness[static_cast<std::size_t>(s)] == 1);
    CHECK(out.staleness[static_cast<std::size_t>(n - 1)] == 1 + (steps - 1) * n);
    CHECK(out.seconds == Approx(steps * 1e-3).epsilon(1e-6)); // steps of 1 ms; messages cost nothing here
  }
}

TEST_CASE("virtual time: SSP's clock gap never exceeds its bound plus one with stragglers") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 7);
  for (int bound : {0, 2, 5}) {
    INFO("bound " << bound);
    auto setup = tiny_async(8, 24);
    setup.ps.staleness_bound = bound;
    auto vs = constant_compute(1e-3, 4, 2);
    vs.compute[0].dist = compute_model::shape::straggler;
    vs.compute[0].straggler_p = 0.2;
    vs.compute[0].straggler_k = 8;
    const auto out = run_virtual(setup, data, vs);
    for (const auto& rep : out.reports)
      REQUIRE(rep.error.empty());
    CHECK(out.max_clock_gap <= bound + 1);
    CHECK(out.max_clock_gap >= std::min(bound, 1)); // stragglers do open the gap
  }
}

namespace {
/// Runs `setup` in real time and on `vs` (arrival order varied by a
/// lognormal step time, 15 us and 5 Gb/s between hosts): the same bits,
/// and every worker through every step.
void same_model_as_real(const scheduler::topology_setup& setup, const models::dataset& data,
                        scheduler::virtual_setup vs) {
  actor_env env;
  const auto real = scheduler::run_topology(*env.sys, setup, data);
  vs.compute[0].dist = compute_model::shape::lognormal;
  vs.compute[0].cv = 0.5;
  vs.link.latency_us = 15;
  vs.link.bandwidth_gbps = 5;
  for (int threads : {1, 3}) { // the batches on the loop, or on helpers
    INFO(threads << " threads");
    vs.threads = threads;
    const auto virt = run_virtual(setup, data, vs);
    CHECK(same_bits(real.params, virt.params));
    for (const auto& rep : virt.reports) {
      CHECK(rep.error.empty());
      CHECK(rep.steps == setup.steps);
    }
  }
}
} // namespace

TEST_CASE("virtual time: a ring trains the same model bit for bit as in real time, on 1 and 3 threads") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 10);
  for (auto kind : {&scheduler::ring_family, &scheduler::hierarchical_family}) {
    for (bool overlap : {false, true}) {
      if (kind == &scheduler::hierarchical_family && overlap)
        continue;
      INFO((kind == &scheduler::ring_family ? "ring" : "hierarchical") << (overlap ? " with overlap" : ""));
      auto setup = small_setup(4, 1, true);
      setup.family = kind;
      setup.ring.group_size = 2;
      setup.ring.overlap = overlap;
      setup.ring.bucket_floats = 4096; // several buckets, several chunks each
      setup.ring.chunk_floats = 1024;
      setup.steps = 6;
      same_model_as_real(setup, data, constant_compute(1e-3, 2, 2));
    }
  }
}

TEST_CASE("virtual time: hosts of different sizes place each worker on its host and group a hierarchical ring by host") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 10);
  auto setup = small_setup(5, 1, true);
  setup.family = &scheduler::hierarchical_family;
  setup.ring.group_of = {0, 0, 1, 1, 1}; // a host of 2 workers, one of 3
  setup.ring.bucket_floats = 4096;
  setup.ring.chunk_floats = 1024;
  setup.steps = 6;
  auto vs = constant_compute(1e-3, 3, 2);
  vs.host_of = {0, 0, 1, 1, 1};
  same_model_as_real(setup, data, vs);
  caf::actor_system_config cfg;
  scheduler::configure_virtual(cfg);
  caf::actor_system sys{cfg};
  auto sim = scheduler::simulation::make(sys, vs);
  CHECK(sim->host_of_worker(1) == 0);
  CHECK(sim->host_of_worker(2) == 1); // not 2 / workers_per_host (3) = 0
  vs.host_of = {0, 0, 2, 1, 1};
  CHECK_THROWS_WITH(scheduler::simulation::make(sys, vs), Catch::Contains("worker 2 on host 2 of 2"));
}

TEST_CASE("virtual time: D-PSGD gives the real run's model and AD-PSGD repeats itself bit for bit, on 1 and 3 threads") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 12);
  auto setup = small_setup(5, 1, true);
  setup.family = &scheduler::gossip_family;
  setup.gossip.graph = "ring";
  setup.steps = 6;
  auto vs = constant_compute(1e-3, 2, 3);
  vs.compute[0].dist = compute_model::shape::straggler;
  vs.compute[0].straggler_p = 0.3;
  vs.compute[0].straggler_k = 5;
  vs.link.latency_us = 25;
  vs.link.bandwidth_gbps = 10;
  {
    actor_env env;
    const auto real = scheduler::run_topology(*env.sys, setup, data);
    for (int threads : {1, 3}) {
      vs.threads = threads;
      const auto virt = run_virtual(setup, data, vs);
      CHECK(same_bits(real.params, virt.params));
    }
  }
  // AD-PSGD: a mixer averages into x_i while its worker's gradient computes
  // on another thread; the gradient was taken at the worker's read of x_i.
  setup.gossip.mode = actors::gossip_mode::adpsgd;
  vs.threads = 1;
  const auto a = run_virtual(setup, data, vs);
  vs.threads = 3;
  const auto b = run_virtual(setup, data, vs);
  for (const auto& rep : a.reports)
    CHECK(rep.error.empty());
  CHECK(same_bits(a.params, b.params));
  CHECK(a.replica_spread == b.replica_spread);
  CHECK(a.seconds == b.seconds);
}

TEST_CASE("virtual time: every parameter-server variant and local SGD run and repeat themselves bit for bit on 1, 2 and 4 threads") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 13);
  struct variant {
    const char* name;
    std::function<void(topology_setup&)> set;
  };
  const std::vector<variant> variants = {
    {"sync", [](topology_setup& s) { s.ps.sync = true; }},
    {"sync with a backup worker", [](topology_setup& s) { s.ps.sync = true; s.ps.backup = 1; }},
    {"SSP s=1", [](topology_setup& s) { s.ps.sync = false; s.ps.staleness_bound = 1; }},
    {"async, staleness lr", [](topology_setup& s) { s.ps.sync = false; s.ps.staleness_lr = true; }},
    {"async, DC-ASGD", [](topology_setup& s) { s.ps.sync = false; s.ps.dc_lambda = 0.04f; }},
    {"async, separate pulls", [](topology_setup& s) { s.ps.sync = false; s.ps.push_pull = false; }},
    {"local SGD H=3", [](topology_setup& s) { s.family = &scheduler::local_sgd_family; s.ps.local_steps = 3; }},
    {"DiLoCo H=3", [](topology_setup& s) {
       s.family = &scheduler::diloco_family;
       s.ps.local_steps = 3;
       s.ps.outer = true;
     }},
  };
  auto vs = constant_compute(1e-3, 2, 2);
  vs.compute[0].dist = compute_model::shape::straggler;
  vs.compute[0].straggler_p = 0.25;
  vs.compute[0].straggler_k = 3;
  vs.link.latency_us = 10;
  vs.link.bandwidth_gbps = 10;
  for (const auto& v : variants) {
    INFO(v.name);
    auto setup = small_setup(4, 2, true);
    setup.steps = 9;
    v.set(setup);
    vs.threads = 1;
    const auto a = run_virtual(setup, data, vs);
    for (const auto& rep : a.reports)
      CHECK(rep.error.empty());
    CHECK(a.seconds > 9 * 1e-3);
    for (int threads : {2, 4}) {
      INFO(threads << " threads");
      vs.threads = threads;
      const auto b = run_virtual(setup, data, vs);
      CHECK(same_bits(a.params, b.params));
      CHECK(a.staleness == b.staleness);
      CHECK(a.dropped == b.dropped);
      CHECK(a.seconds == b.seconds);
    }
  }
}

TEST_CASE("virtual time: heartbeats due while a gradient computes on another thread wait for it, in the same order on any thread count") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 17);
  auto setup = small_setup(4, 1, false);
  setup.steps = 10;
  setup.ps.sync = false;
  auto vs = constant_compute(0.3, 2, 2); // steps longer than half the heartbeat's interval: most hold a beat
  vs.compute[0].dist = compute_model::shape::lognormal;
  vs.compute[0].cv = 0.6;
  vs.link.latency_us = 50;
  vs.seed = 9;
  std::vector<scheduler::topology_outcome> outs;
  for (int threads : {1, 3}) {
    vs.threads = threads;
    std::shared_ptr<scheduler::simulation> sim;
    outs.push_back(run_virtual(setup, data, vs, &sim));
    for (const auto& rep : outs.back().reports)
      CHECK(rep.error.empty()); // a beat taken mid-computation ends its worker with an error
    CHECK(sim->stats().threads == threads);
  }
  CHECK(same_bits(outs[0].params, outs[1].params));
  CHECK(outs[0].staleness == outs[1].staleness);
  CHECK(outs[0].seconds == outs[1].seconds);
  CHECK(outs[0].seconds > 10 * 0.3 * 0.5);
}

TEST_CASE("virtual time: speed balancing moves the global batch toward the workers' speeds") {
  auto data = make_synthetic(4096, 1, 28, 28, 10, 16);
  auto setup = small_setup(2, 1, true);
  setup.family = &scheduler::ring_family;
  setup.ring.balance_every = 5;
  setup.worker_slowdown = {1, 3};
  setup.steps = 60;
  // A step's time scales with its batch: a worker three times slower ends
  // with about a quarter of the global batch of 32, where it began with half.
  const auto out = run_virtual(setup, data, constant_compute(1e-3, 2, 1));
  for (const auto& rep : out.reports)
    REQUIRE(rep.error.empty());
  const double fast = static_cast<double>(out.reports[0].samples), slow = static_cast<double>(out.reports[1].samples);
  CHECK(fast / slow > 2.0);
  CHECK(fast / slow < 3.5);
}

TEST_CASE("virtual time: a stall and a slow spell cost their virtual seconds exactly") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 14);
  {
    INFO("sync, rank 1 stalls 0.5 s after its step 3: every worker waits for it");
    auto setup = small_setup(3, 1, true);
    setup.steps = 6;
    auto f = strike(scheduler::fault_kind::stall, 1, 3);
    f.seconds = 0.5;
    setup.faults = {f};
    const auto out = run_virtual(setup, data, constant_compute(1e-3, 3, 1));
    for (const auto& rep : out.reports)
      REQUIRE(rep.error.empty());
    CHECK(out.seconds == Approx(6e-3 + 0.5).epsilon(1e-9));
  }
  {
    INFO("async, rank 2 computes 5x slower for 2 ms after its step 2: one step of 5 ms");
    auto setup = tiny_async(3, 6);
    auto f = strike(scheduler::fault_kind::slow, 2, 2);
    f.seconds = 2e-3;
    f.factor = 5;
    setup.faults = {f};
    const auto out = run_virtual(setup, data, constant_compute(1e-3, 3, 1));
    REQUIRE(out.reports.size() == 3u);
    CHECK(out.reports[2].compute_seconds == Approx(6e-3 + 4e-3).epsilon(1e-9));
    CHECK(out.reports[0].compute_seconds == Approx(6e-3).epsilon(1e-9));
  }
}

TEST_CASE("virtual time: a budget shared by speed is counted in virtual-time order and the fast workers do more") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 15);
  auto setup = tiny_async(4, 1000);
  setup.worker_slowdown = {1, 1, 1, 3};
  setup.budget_samples = 640; // 160 steps of 4
  const auto a = run_virtual(setup, data, constant_compute(1e-3, 4, 1));
  const auto b = run_virtual(setup, data, constant_compute(1e-3, 4, 1));
  CHECK(a.budget_reached);
  std::int64_t samples = 0;
  for (const auto& rep : a.reports) {
    CHECK(rep.error.empty());
    samples += rep.samples;
  }
  CHECK(samples >= 640);
  CHECK(samples <= 640 + 4 * 4); // each finished at its next step boundary
  CHECK(a.reports[0].steps > 2 * a.reports[3].steps); // 3x slower: about a third of the steps
  CHECK(same_bits(a.params, b.params));
  for (std::size_t r = 0; r < a.reports.size(); ++r)
    CHECK(a.reports[r].steps == b.reports[r].steps);
}

TEST_CASE("virtual time: a worker waiting for what never comes is named, with or without timers") {
  for (bool beating : {false, true}) {
    INFO((beating ? "a heartbeat keeps firing" : "nothing left at all"));
    caf::actor_system_config cfg;
    scheduler::configure_virtual(cfg);
    caf::actor_system sys{cfg};
    auto vs = constant_compute(1e-3, 1, 1);
    vs.stuck_after_s = 5;
    auto sim = scheduler::simulation::make(sys, vs);
    // A "worker" that waits for an int nobody sends, beating every 0.5 s if asked.
    auto idle = sys.spawn([beating](caf::event_based_actor* self) -> caf::behavior {
      if (beating)
        self->delayed_send(self, std::chrono::milliseconds(500), actors::beat_atom::value);
      return {[](int) {},
              [self](actors::beat_atom) { self->delayed_send(self, std::chrono::milliseconds(500), actors::beat_atom::value); }};
    });
    sim->place(idle, 0, 0);
    std::promise<std::string> said;
    sim->on_stuck([&said](int rank, const std::string& why) { said.set_value("worker " + std::to_string(rank) + ": " + why); });
    sim->start();
    auto f = said.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    const auto why = f.get();
    CHECK_THAT(why, Catch::StartsWith("worker 0: ") &&
                      Catch::Contains(beating ? "no message in flight for 5." : "nothing left to happen"));
    sim->stop();
    sim->shut_down();
  }
}

TEST_CASE("virtual time: refuses what it does not simulate, naming the key") {
  auto data = make_synthetic(256, 1, 28, 28, 10, 9);
  auto setup = small_setup(2, 1, false);
  setup.family = &scheduler::hierarchical_family;
  setup.ring.group_size = 1;
  setup.faults = {strike(scheduler::fault_kind::kill, 1, 2)};
  CHECK_THROWS_WITH(run_virtual(setup, data, constant_compute(1e-3, 1, 2)), Catch::Contains("(#1 is kill)"));
  caf::actor_system_config cfg;
  gradwire::actors::configure_scheduler(cfg, 1);
  caf::actor_system sys{cfg};
  CHECK_THROWS_WITH(scheduler::simulation::make(sys, constant_compute(1e-3, 1, 1)),
                    Catch::Contains("test coordinator"));
}
