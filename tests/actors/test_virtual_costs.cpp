// Virtual time's cost models, each against the time it must give exactly:
// alpha-beta messages for a sync step and a ring step, a shard's update
// (apply_gbps), a sender's copies (copy_gbps), hosts of different NICs
// (the slower one's rate), drawn latencies that keep
// each connection in order, and a host's cores taken in turn.
#include "models/model.hpp"
#include "virtual_support.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <catch2/catch.hpp>

#include <tuple>
#include <vector>

using namespace gradwire;
using namespace gwtest;
using models::make_synthetic;

TEST_CASE("virtual time: a sync step takes compute plus four messages under the alpha-beta model") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 8);
  auto setup = small_setup(3, 1, true);
  setup.steps = 5;
  auto vs = constant_compute(2e-3, 1, 3); // one worker per host; the shard on host 0
  vs.link.latency_us = 50;
  vs.link.bandwidth_gbps = 1;
  vs.link.nic = false;
  const auto out = run_virtual(setup, data, vs);
  for (const auto& rep : out.reports)
    REQUIRE(rep.error.empty());
  const double p = static_cast<double>(models::model(setup.spec, kernels::device::cpu(), 1).size());
  // Pull request and push reply: a 64-byte header; pull reply and push: header and the parameters.
  const double bytes = 4 * 64 + 2 * 4 * p;
  const double step = 2e-3 + 4 * 50e-6 + bytes * 8 / 1e9;
  CHECK(out.seconds == Approx(5 * step).epsilon(1e-6));
}

TEST_CASE("virtual time: a message between hosts of different NICs moves at the slower NIC's rate") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 8);
  // Worker 0 and the shard on host 0 (4 Gb/s), worker 1 on host 1 (0.5):
  // pull replies leave the fast NIC and pushes the slow one, all at 0.5.
  // Three hosts without the NIC model: the sync step waits for worker 2's
  // messages at 0.5 Gb/s, worker 1's at 2 (one NIC per host would also
  // queue the shard's two replies behind each other on host 0).
  for (int hosts : {2, 3})
    for (bool nic : {false, true}) {
      if (hosts == 3 && nic)
        continue;
      INFO(hosts << " hosts, " << (nic ? "one NIC per host" : "no NIC model"));
      auto setup = small_setup(hosts, 1, true);
      setup.steps = 5;
      const double p = static_cast<double>(models::model(setup.spec, kernels::device::cpu(), 1).size());
      auto vs = constant_compute(2e-3, 1, hosts);
      vs.link.latency_us = 50;
      vs.link.bandwidth_gbps = 8; // not used: every host names its own
      vs.link.nic = nic;
      vs.link.host_gbps = hosts == 2 ? std::vector<double>{4, 0.5} : std::vector<double>{4, 2, 0.5};
      const auto out = run_virtual(setup, data, vs);
      for (const auto& rep : out.reports)
        REQUIRE(rep.error.empty());
      const double step = 2e-3 + 4 * 50e-6 + (4 * 64 + 2 * 4 * p) * 8 / 0.5e9;
      CHECK(out.seconds == Approx(5 * step).epsilon(1e-6));
    }
  caf::actor_system_config cfg;
  scheduler::configure_virtual(cfg);
  caf::actor_system sys{cfg};
  auto vs = constant_compute(2e-3, 1, 3);
  vs.link.host_gbps = {4, 2};
  CHECK_THROWS_WITH(scheduler::simulation::make(sys, vs), Catch::Contains("2 NIC rates for 3 hosts"));
  vs.link.host_gbps = {4, 2, 0};
  CHECK_THROWS_WITH(scheduler::simulation::make(sys, vs), Catch::Contains("NIC rate must be > 0"));
}

TEST_CASE("virtual time: a shard applying a gradient is busy for its bytes over apply_gbps") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 8);
  auto setup = small_setup(3, 1, true);
  setup.steps = 5;
  auto vs = constant_compute(2e-3, 1, 3);
  vs.link.latency_us = 50;
  vs.link.bandwidth_gbps = 1;
  vs.link.nic = false;
  const double p = static_cast<double>(models::model(setup.spec, kernels::device::cpu(), 1).size());
  const double step = 2e-3 + 4 * 50e-6 + (4 * 64 + 2 * 4 * p) * 8 / 1e9;
  for (double gbps : {0.0, 0.5, 2.0}) {
    INFO("apply_gbps " << gbps);
    vs.apply_gbps = gbps;
    const auto out = run_virtual(setup, data, vs);
    for (const auto& rep : out.reports)
      REQUIRE(rep.error.empty());
    // A sync step applies the summed gradient once, between the last push
    // and the pull replies: every worker waits for it.
    const double apply = gbps > 0 ? 4 * p / (gbps * 1e9) : 0.0;
    CHECK(out.seconds == Approx(5 * (step + apply)).epsilon(1e-6));
  }
}

TEST_CASE("virtual time: a sender copying a message's tensors is busy for their bytes over copy_gbps") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 8);
  for (int n : {1, 3}) {
    auto setup = small_setup(n, 1, true);
    setup.steps = 5;
    auto vs = constant_compute(2e-3, 1, n);
    vs.link.latency_us = 50;
    vs.link.bandwidth_gbps = 1;
    vs.link.nic = false;
    const double p = static_cast<double>(models::model(setup.spec, kernels::device::cpu(), 1).size());
    const double step = 2e-3 + 4 * 50e-6 + (4 * 64 + 2 * 4 * p) * 8 / 1e9; // 3 workers, one per host
    for (double gbps : {0.0, 1.0, 4.0}) {
      INFO(n << " workers, copy_gbps " << gbps);
      vs.copy_gbps = gbps;
      const auto out = run_virtual(setup, data, vs);
      for (const auto& rep : out.reports)
        REQUIRE(rep.error.empty());
      const double copy = gbps > 0 ? 4 * p / (gbps * 1e9) : 0.0;
      if (n == 1) { // beside its shard (links free): compute, its push's copy, the reply's copy
        CHECK(out.seconds == Approx(5 * (2e-3 + 2 * copy)).epsilon(1e-6));
        continue;
      }
      // The shard copies its three replies one after another, and the last
      // worker served may push last: between 3 and 4 copies a step.
      CHECK(out.seconds >= 5 * (step + 3 * copy) - 1e-9);
      CHECK(out.seconds <= 5 * (step + 4 * copy) + 1e-9);
    }
  }
}

TEST_CASE("virtual time: drawn latencies repeat themselves and keep each connection in order") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 12);
  // A ring is lock step: whatever the latencies, its model is the real
  // run's, bit for bit, as long as no chunk overtakes an earlier one.
  auto ring = small_setup(4, 1, true);
  ring.family = &scheduler::ring_family;
  ring.ring.bucket_floats = 4096;
  ring.ring.chunk_floats = 1024;
  ring.steps = 6;
  actor_env env;
  const auto real = scheduler::run_topology(*env.sys, ring, data);
  auto vs = constant_compute(1e-3, 2, 2);
  vs.link.latency_us = 15;
  vs.link.intra_latency_us = 5;
  vs.link.latency_cv = 2.0;
  const auto virt = run_virtual(ring, data, vs);
  CHECK(same_bits(real.params, virt.params));
  // Async: the drawn latencies decide the interleaving, the same one from
  // the same seed, another without them.
  auto async = small_setup(4, 2, false);
  async.steps = 12;
  const auto a = run_virtual(async, data, vs);
  const auto b = run_virtual(async, data, vs);
  CHECK(same_bits(a.params, b.params));
  CHECK(a.staleness == b.staleness);
  CHECK(a.seconds == b.seconds);
  vs.link.latency_cv = 0;
  const auto c = run_virtual(async, data, vs);
  CHECK(c.seconds != a.seconds);
}

TEST_CASE("virtual time: workers sharing a host's cores compute in waves of that many") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 8);
  std::vector<float> first;
  // N workers on one host of C cores (0: no limit), 2 ms steps, messages
  // free, the shard's handlers free: a sync step takes ceil(N / C) steps'
  // compute, since a computation holds its core and the rest wait for one.
  for (auto [n, cores, waves] : {std::tuple{4, 2, 2}, std::tuple{3, 2, 2}, std::tuple{3, 1, 3}, std::tuple{3, 0, 1},
                                 std::tuple{3, 3, 1}}) {
    INFO(n << " workers, " << cores << " cores");
    auto setup = small_setup(n, 1, true);
    setup.steps = 5;
    auto vs = constant_compute(2e-3, n, 1);
    vs.cores_per_host = cores;
    const auto out = run_virtual(setup, data, vs);
    for (const auto& rep : out.reports)
      REQUIRE(rep.error.empty());
    CHECK(out.seconds == Approx(5 * waves * 2e-3).epsilon(1e-6));
    if (n == 3 && first.empty())
      first = out.params;
    else if (n == 3) // only time is modelled: the same sync steps give the same model
      CHECK(same_bits(first, out.params));
  }
}

TEST_CASE("virtual time: a ring step takes 2(N-1) hops of alpha plus S/N over beta") {
  auto data = make_synthetic(2048, 1, 28, 28, 10, 11);
  for (int n : {3, 4, 8}) {
    INFO(n << " workers, one per host");
    auto setup = small_setup(n, 1, true);
    setup.family = &scheduler::ring_family;
    setup.spec.hidden = {64};
    setup.batch_size = 8;
    setup.steps = 4;
    setup.ring.bucket_floats = 1 << 22; // one bucket, one chunk per segment
    setup.ring.chunk_floats = 1 << 22;
    auto vs = constant_compute(2e-3, 1, n);
    vs.link.latency_us = 30;
    vs.link.bandwidth_gbps = 2;
    const auto out = run_virtual(setup, data, vs);
    for (const auto& rep : out.reports)
      REQUIRE(rep.error.empty());
    const double p = static_cast<double>(models::model(setup.spec, kernels::device::cpu(), 1).size());
    const double hop = 30e-6 + (p * 4 / n + 64) * 8 / 2e9;
    const double step = 2e-3 + 2 * (n - 1) * hop;
    // The segments differ by up to 16 floats (aligned edges): within 0.5%.
    CHECK(out.seconds == Approx(4 * step).epsilon(5e-3));
  }
}
