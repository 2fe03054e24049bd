// The split of a lockstep topology's step time into compute, imbalance
// (waiting for a slower worker's compute) and exchange.
#include "scheduler/app/step_breakdown.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ps_wiring.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <catch2/catch.hpp>

using namespace gradwire;

namespace {

actors::worker_report report(std::vector<float> step_ms, double seconds) {
  actors::worker_report r;
  r.step_compute_ms = std::move(step_ms);
  for (float ms : r.step_compute_ms)
    r.compute_seconds += ms * 1e-3;
  r.seconds = seconds;
  return r;
}

} // namespace

TEST_CASE("step breakdown: the slowest compute per step, the mean compute and the rest") {
  // Steps of 1+2 and 3+2 ms; 10 ms of wall each: compute 4 of 10 ms, the
  // mean worker waits 0.5 ms a step for the slower one, exchange the rest.
  const auto b = scheduler::breakdown_of({report({1, 3}, 0.010), report({2, 2}, 0.010)});
  REQUIRE(b.steps == 2);
  CHECK(b.compute == Approx(0.4));
  CHECK(b.imbalance == Approx(0.1));
  CHECK(b.exchange == Approx(0.5));
  CHECK(b.compute + b.imbalance + b.exchange == Approx(1.0));
}

TEST_CASE("step breakdown: equal workers have no imbalance, one worker neither") {
  const auto eq = scheduler::breakdown_of({report({2, 2, 2}, 0.008), report({2, 2, 2}, 0.008)});
  CHECK(eq.imbalance == Approx(0.0).margin(1e-12));
  CHECK(eq.compute == Approx(0.75));
  CHECK(eq.exchange == Approx(0.25));
  const auto one = scheduler::breakdown_of({report({5, 1, 3}, 0.010)});
  CHECK(one.imbalance == Approx(0.0).margin(1e-12));
  CHECK(one.exchange == Approx(0.1));
}

TEST_CASE("step breakdown: steps beyond the shortest record are not compared, empty input gives none") {
  // The second worker recorded one step: only step 0 counts towards the imbalance.
  const auto b = scheduler::breakdown_of({report({4, 100}, 0.2), report({2}, 0.2)});
  REQUIRE(b.steps == 1);
  CHECK(b.imbalance == Approx(0.001 / 0.2));
  CHECK(scheduler::breakdown_of({}).steps == 0);
  CHECK(scheduler::breakdown_of({report({}, 1.0)}).steps == 0);
  CHECK(scheduler::breakdown_of({report({1}, 0.0)}).steps == 0);
}

TEST_CASE("lockstep: ring, hierarchical and the sync parameter server without backups, nothing else") {
  auto with = [](const scheduler::topology_family* k, bool sync, int backup = 0) {
    scheduler::topology_setup s;
    s.family = k;
    s.ps.sync = sync;
    s.ps.backup = backup;
    return scheduler::lockstep(s);
  };
  CHECK(with(&scheduler::ring_family, true));
  CHECK(with(&scheduler::hierarchical_family, true));
  CHECK(with(&scheduler::parameter_server_family, true));
  CHECK_FALSE(with(&scheduler::parameter_server_family, true, 1)); // backups: the slowest worker's step is dropped
  CHECK_FALSE(with(&scheduler::parameter_server_family, false));   // async and SSP
  CHECK_FALSE(with(&scheduler::gossip_family, true));              // neighbours only
  CHECK_FALSE(with(&scheduler::local_sgd_family, true));           // every H steps
}
