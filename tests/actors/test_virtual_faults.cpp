// Faults in virtual time that end a worker: a kill strikes at a worker's
// step boundary (or the first boundary after a virtual time), the worker
// ends there as its process would, and the loop tells the survivors at
// that time: a parameter server (async, sync, SSP) or gossip (AD-PSGD,
// D-PSGD) goes on without it, the same bits on 1 and 3 threads. An
// elastic ring re-forms inside the simulation, and a killed worker with a
// back_at_step comes back into it there.
#include "models/dataset.hpp"
#include "virtual_support.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <catch2/catch.hpp>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;

namespace {

scheduler::fault_strike kill_of(int rank, std::int64_t at_step, double at_seconds = -1) {
  return strike(scheduler::fault_kind::kill, rank, at_step, at_seconds);
}

scheduler::topology_setup adpsgd(scheduler::topology_setup s) {
  s.family = &scheduler::gossip_family;
  s.gossip.mode = actors::gossip_mode::adpsgd;
  s.gossip.graph = "complete";
  return s;
}

scheduler::virtual_setup on_threads(int threads) {
  auto vs = constant_compute(1e-3, 4, 1);
  vs.threads = threads;
  return vs;
}

} // namespace

namespace {

/// The topologies a kill is simulated in, by name.
scheduler::topology_setup variant(const std::string& name) {
  auto s = tiny_async(4, 40);
  if (name == "AD-PSGD")
    return adpsgd(s);
  if (name == "D-PSGD") {
    s = adpsgd(s);
    s.gossip.mode = actors::gossip_mode::dpsgd;
    s.gossip.graph = "ring";
  } else if (name == "sync parameter server")
    s.ps.sync = true;
  else if (name == "SSP")
    s.ps.staleness_bound = 2;
  return s;
}

} // namespace

TEST_CASE("virtual time: a kill ends its worker at that step, and parameter servers and gossip go on, the same bits on 1 and 3 threads") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 41);
  for (const std::string name : {"async parameter server", "AD-PSGD", "D-PSGD", "sync parameter server", "SSP"}) {
    INFO(name);
    auto setup = variant(name);
    const auto whole = run_virtual(setup, data, on_threads(1));
    setup.faults = {kill_of(2, 10)};
    const auto a = run_virtual(setup, data, on_threads(1));
    const auto b = run_virtual(setup, data, on_threads(3));
    REQUIRE(a.reports.size() == 4u);
    CHECK(a.lost == std::vector<int>{2});
    CHECK(a.reports[2].steps == 10);
    CHECK_THAT(a.reports[2].error, Catch::Contains("killed by [[faults]] #1 after step 10"));
    for (int r : {0, 1, 3}) {
      CHECK(a.reports[static_cast<std::size_t>(r)].error.empty());
      CHECK(a.reports[static_cast<std::size_t>(r)].steps == 40);
    }
    REQUIRE(a.faults.size() == 1u);
    CHECK(a.faults[0].rank == 2);
    CHECK(a.faults[0].at_step == 10);
    CHECK(a.faults[0].workers_after == 3);
    CHECK(a.faults[0].detected_at > 0);
    CHECK(a.faults[0].detected_at < a.seconds);
    CHECK(same_bits(a.params, b.params));
    CHECK_FALSE(same_bits(a.params, whole.params)); // the kill changed the run
  }
}

TEST_CASE("virtual time: a kill by time strikes at the first step boundary after it, on the virtual clock") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 42);
  auto setup = tiny_async(3, 40);
  setup.faults = {kill_of(1, 0, 0.0105)}; // half way into its 11th step (constant_compute's 1 ms steps)
  const auto a = run_virtual(setup, data, on_threads(1));
  const auto b = run_virtual(setup, data, on_threads(2));
  REQUIRE(a.lost == std::vector<int>{1});
  CHECK(a.reports[1].steps >= 9);
  CHECK(a.reports[1].steps <= 12);
  CHECK(a.reports[1].steps == b.reports[1].steps);
  CHECK(same_bits(a.params, b.params));
}

namespace {

/// A flat ring that re-forms without a lost worker (train.min_workers).
scheduler::topology_setup elastic_ring(int workers, int steps) {
  auto s = tiny_async(workers, steps);
  s.family = &scheduler::ring_family;
  s.ring.sharded_update = false;
  s.min_workers = 1;
  return s;
}

/// Other timings: each step's compute drawn lognormal, and slow links.
scheduler::virtual_setup jittered(int threads) {
  auto vs = on_threads(threads);
  vs.compute[0].dist = scheduler::compute_model::shape::lognormal;
  vs.compute[0].cv = 0.5;
  vs.link.intra_latency_us = 150;
  vs.link.latency_cv = 0.3;
  return vs;
}

} // namespace

TEST_CASE("virtual time: a ring that loses a worker re-forms without it inside the simulation, the same bits on 1 and 3 threads") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 43);
  auto setup = elastic_ring(4, 40);
  const auto whole = run_virtual(setup, data, on_threads(1));
  setup.faults = {kill_of(2, 10)};
  const auto a = run_virtual(setup, data, on_threads(1));
  const auto b = run_virtual(setup, data, on_threads(3));
  CHECK(a.lost == std::vector<int>{2});
  CHECK(a.reports[2].steps == 10);
  for (int r : {0, 1, 3})
    CHECK(a.reports[static_cast<std::size_t>(r)].steps == 40);
  REQUIRE(a.faults.size() == 1u);
  CHECK(a.faults[0].at_step == 10); // the survivors redo the step the kill cut short, as three
  CHECK(a.faults[0].workers_after == 3);
  CHECK(a.faults[0].recovered_at > a.faults[0].detected_at); // the protocol's messages take virtual time
  CHECK(a.faults[0].rejoined_step == -1);
  CHECK(a.replica_spread == 0.0); // every survivor holds one model
  CHECK(same_bits(a.params, b.params));
  CHECK_FALSE(same_bits(a.params, whole.params));
}

TEST_CASE("virtual time: kill, re-form, then rejoin at a fixed step: the replacement takes a survivor's state, and the bits do not depend on timing") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 44);
  auto setup = elastic_ring(4, 40);
  setup.faults = {kill_of(2, 10)};
  const auto without = run_virtual(setup, data, on_threads(1));
  setup.back_at_step = {{2, 25}};
  setup.restarts = 1; // a new process for it
  const auto a = run_virtual(setup, data, on_threads(1));
  const auto b = run_virtual(setup, data, jittered(3));
  for (const auto* run : {&a, &b}) {
    CHECK(run->lost.empty()); // back in the ring, and done with it
    REQUIRE(run->faults.size() == 1u);
    CHECK(run->faults[0].rank == 2);
    CHECK(run->faults[0].at_step == 10);
    CHECK(run->faults[0].rejoined_step == 25);
    CHECK(run->faults[0].rejoined_at > run->faults[0].recovered_at);
    for (const auto& rep : run->reports) {
      CHECK(rep.error.empty());
      CHECK(rep.steps == 40);
    }
    CHECK(run->replica_spread == 0.0); // the replacement's replica is the survivors'
  }
  CHECK(b.seconds != a.seconds);       // another timing,
  CHECK(same_bits(a.params, b.params)); // the same re-forms at the same steps: the same model
  CHECK_FALSE(same_bits(a.params, without.params));
}

TEST_CASE("virtual time: train.restarts brings a killed ring worker back restart_s after its kill, once per restart") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 46);
  auto setup = elastic_ring(4, 40);
  setup.faults = {kill_of(1, 8), kill_of(3, 12)};
  setup.restarts = 1; // the first kill's process comes back, the second's does not
  auto vs = [](int threads) {
    auto v = on_threads(threads);
    v.restart_s = 0.005; // a few of on_threads' steps
    return v;
  };
  const auto a = run_virtual(setup, data, vs(1));
  const auto b = run_virtual(setup, data, vs(3));
  CHECK(a.lost == std::vector<int>{3});
  REQUIRE(a.faults.size() == 2u);
  const auto& back = a.faults[0];
  CHECK(back.rank == 1);
  CHECK(back.rejoined_at >= back.detected_at + 0.005);
  CHECK(back.rejoined_at < back.detected_at + 0.005 + 0.003); // let in at once: the re-form's messages only
  CHECK(back.rejoined_step >= 12); // about five steps on (the other kill's re-form among them)
  CHECK(a.faults[1].rank == 3);
  CHECK(a.faults[1].rejoined_step == -1);
  CHECK(a.reports[1].steps == 40);
  CHECK(a.replica_spread == 0.0);
  CHECK(same_bits(a.params, b.params));
  CHECK(a.faults[0].rejoined_step == b.faults[0].rejoined_step);
}

namespace {

/// A [[faults]] entry on the links of `rank` (every peer) after its step 10.
scheduler::fault_strike on_links(scheduler::fault_kind kind, int rank, double seconds, double delay_ms = 0) {
  auto f = strike(kind, rank, 10);
  f.seconds = seconds;
  f.delay_ms = delay_ms;
  return f;
}

} // namespace

TEST_CASE("virtual time: a link down, a partition or a delay holds one process's messages for its window, and a ring waits it out with the same bits") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 47);
  auto setup = tiny_async(4, 40);
  setup.family = &scheduler::ring_family;
  const auto whole = run_virtual(setup, data, on_threads(1));
  setup.faults = {on_links(scheduler::fault_kind::drop, 1, 0.02)};
  const auto down = run_virtual(setup, data, on_threads(1));
  auto cut = on_links(scheduler::fault_kind::partition, 0, 0.015);
  cut.ranks = {0, 1};
  setup.faults = {cut};
  const auto parted = run_virtual(setup, data, on_threads(3));
  setup.faults = {on_links(scheduler::fault_kind::delay, 1, 0.01, 3.0)};
  const auto slow = run_virtual(setup, data, on_threads(1));
  // The ring stops for the window, less the step's compute that overlaps it.
  CHECK(down.seconds - whole.seconds == Approx(0.02).margin(0.0015));
  CHECK(parted.seconds - whole.seconds == Approx(0.015).margin(0.0015));
  CHECK(slow.seconds > whole.seconds + 0.006); // each of rank 1's hops in the window takes the delay more
  CHECK(slow.seconds < whole.seconds + 0.02);
  for (const auto* run : {&down, &parted, &slow}) // lock step: only the timing changes
    CHECK(same_bits(run->params, whole.params));
}

TEST_CASE("virtual time: a delayed worker of an async parameter server is staler, the same bits on 1 and 3 threads") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 48);
  auto setup = tiny_async(4, 40);
  const auto whole = run_virtual(setup, data, on_threads(1));
  setup.faults = {on_links(scheduler::fault_kind::delay, 2, 0.02, 2.0)};
  const auto a = run_virtual(setup, data, on_threads(1));
  const auto b = run_virtual(setup, data, on_threads(3));
  CHECK(same_bits(a.params, b.params));
  CHECK_FALSE(same_bits(a.params, whole.params));
  CHECK(a.reports[2].seconds > whole.reports[2].seconds + 0.01); // each round trip in the window takes twice the delay more
}

TEST_CASE("virtual time: a suspended host stops every actor on it for its seconds: a ring waits, an async server's other workers go on") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 49);
  auto two_hosts = [](int threads) {
    auto vs = constant_compute(1e-3, 2, 2);
    vs.threads = threads;
    return vs;
  };
  auto ring = tiny_async(4, 40);
  ring.family = &scheduler::ring_family;
  const auto whole = run_virtual(ring, data, two_hosts(1));
  ring.faults = {on_links(scheduler::fault_kind::suspend, 2, 0.02)}; // ranks 2 and 3's host
  const auto held = run_virtual(ring, data, two_hosts(3));
  CHECK(held.seconds - whole.seconds == Approx(0.02).margin(0.0015));
  CHECK(same_bits(held.params, whole.params));

  auto ps = tiny_async(4, 40); // its shard on host 0
  const auto free = run_virtual(ps, data, two_hosts(1));
  ps.faults = {on_links(scheduler::fault_kind::suspend, 3, 0.02)};
  const auto a = run_virtual(ps, data, two_hosts(1));
  const auto b = run_virtual(ps, data, two_hosts(3));
  CHECK(same_bits(a.params, b.params));
  for (int r : {2, 3}) // both workers of the suspended host finish the suspend's seconds later
    CHECK(a.reports[static_cast<std::size_t>(r)].seconds ==
          Approx(free.reports[static_cast<std::size_t>(r)].seconds + 0.02).margin(0.002));
  for (int r : {0, 1}) // the others do not wait for them
    CHECK(a.reports[static_cast<std::size_t>(r)].seconds < free.reports[static_cast<std::size_t>(r)].seconds + 0.005);
}

TEST_CASE("virtual time: a kill in a ring that cannot re-form, or in a hierarchical ring, is refused saying why") {
  auto data = make_synthetic(256, 1, 28, 28, 10, 45);
  auto ring = elastic_ring(2, 4);
  ring.faults = {kill_of(1, 2)};
  ring.ring.sharded_update = true;
  CHECK_THROWS_WITH(run_virtual(ring, data, constant_compute(1e-3, 1, 2)),
                    Catch::Contains("does not: with topology.ring.sharded_update"));
  ring.family = &scheduler::hierarchical_family;
  CHECK_THROWS_WITH(run_virtual(ring, data, constant_compute(1e-3, 1, 2)),
                    Catch::Contains("not a hierarchical ring"));
}
