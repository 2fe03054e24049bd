// Async DiLoCo (topology.kind = "diloco", mode "async"): each worker's
// pseudo-gradient applied by the shards' outer optimizer as it comes.
// One worker is sync DiLoCo bit for bit; at 3 workers in lock step every
// pseudo-gradient after the first round is N - 1 outer versions stale,
// the same on any thread count; and with outer SGD at lr 1/N it learns.
#include "actors/local_steps.hpp"
#include "topology_support.hpp"
#include "virtual_support.hpp"
#include "scheduler/runtime/ps_wiring.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace gradwire;
using namespace gwtest;
using models::make_synthetic;
using scheduler::topology_setup;

namespace {

topology_setup diloco_setup(int workers, bool sync) {
  auto s = small_setup(workers, 2, sync);
  s.family = &scheduler::diloco_family;
  s.ps.local_steps = 4;
  s.ps.outer = true;
  s.ps.outer_lr = 0.7f;
  s.ps.outer_momentum = 0.9f;
  s.opt.kind = "adamw";
  s.opt.lr = 1e-3f;
  s.steps = 30; // 7 rounds of 4 and a last one of 2
  return s;
}

} // namespace

TEST_CASE("async DiLoCo with one worker is sync DiLoCo bit for bit, outer Nesterov included") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 21);
  const auto sync = scheduler::run_topology(*env.sys, diloco_setup(1, true), data);
  const auto async = scheduler::run_topology(*env.sys, diloco_setup(1, false), data);
  for (const auto* out : {&sync, &async})
    for (const auto& rep : out->reports)
      CHECK(rep.error.empty());
  // The pseudo-gradient base - x is the shard's w - mean with one worker:
  // the same outer step on the same values.
  CHECK(same_bits(sync.params, async.params));
  REQUIRE(async.reports.size() == 1u);
  CHECK(async.reports[0].staleness.size() == 2u * 8u); // 8 pushes to each of 2 shards, one a round
  for (auto s : async.reports[0].staleness)
    CHECK(s == 0); // alone, nothing moves the shards between its pull and its push
}

TEST_CASE("async DiLoCo in lock step: pseudo-gradients N - 1 outer versions stale, the same bits on 1 and 3 threads") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 22);
  auto setup = diloco_setup(3, false);
  setup.ps.shards = 1;
  setup.ps.outer_lr = 1.f / 3.f; // outer SGD at lr 1/N: the average, a worker at a time
  setup.ps.outer_momentum = 0.f;
  auto vs = constant_compute(1e-3, 3, 1);
  std::vector<scheduler::topology_outcome> outs;
  for (int threads : {1, 3}) {
    vs.threads = threads;
    outs.push_back(run_virtual(setup, data, vs));
    for (const auto& rep : outs.back().reports) {
      REQUIRE(rep.error.empty());
      REQUIRE(rep.staleness.size() == 8u);
      for (std::size_t k = 1; k < rep.staleness.size(); ++k)
        CHECK(rep.staleness[k] == 2); // the two others' pseudo-gradients came in since its pull
    }
  }
  CHECK(same_bits(outs[0].params, outs[1].params));
  CHECK(outs[0].staleness == outs[1].staleness);
  const auto [before, after] = losses(setup, outs[0].params, data);
  INFO("loss before " << before << ", after " << after);
  CHECK(after < 0.7 * before);
}

TEST_CASE("async DiLoCo's delayed Nesterov: plain steps between, a Nesterov step on the mean every N pushes") {
  actor_env env;
  auto sc = one_worker_shard(0, false);
  sc.ps.local_steps = 4;
  sc.ps.outer = true;
  sc.ps.outer_lr = 0.5f;
  sc.ps.outer_momentum = 0.9f;
  sc.ps.outer_delay = 3;
  REQUIRE(sc.ps.delayed_nesterov());
  auto shard = actors::spawn_ps_shard(*env.sys, sc, actors::slice::zeros({64}));
  caf::scoped_actor self{*env.sys};
  auto push = [&](float value, std::int64_t version) {
    auto g = actors::slice::empty({64});
    for (std::int64_t i = 0; i < 64; ++i)
      g.data()[i] = value * static_cast<float>(i + 1);
    self->request(shard, std::chrono::seconds(10), actors::push_atom::value, 0, version, version, std::int64_t{16}, g)
      .receive([](std::int64_t, std::int64_t) {}, [&](caf::error& e) { FAIL(env.sys->render(e)); });
  };
  // Six pushes of g_k = c_k (1, 2, ..., 64): k = 1, 2 plain, 3 Nesterov on
  // the mean of 1..3; 4, 5 plain, 6 Nesterov on the mean of 4..6 with the
  // momentum of the first.
  const float c[] = {1.f, 2.f, 3.f, -1.f, 0.5f, 2.f};
  double w = 0, buf = 0; // per unit of (i + 1)
  for (int k = 0; k < 6; ++k) {
    push(c[k], k);
    if (k % 3 < 2) {
      w -= 0.5 * c[k];
    } else {
      const double mean = (c[k - 2] + c[k - 1] + c[k]) / 3.0;
      buf = k == 2 ? mean : 0.9 * buf + mean;
      w -= 0.5 * (mean + 0.9 * buf);
    }
    const auto p = fetched(self, shard).second;
    REQUIRE(p.size() == 64);
    INFO("after push " << k + 1);
    for (std::size_t i = 0; i < 64; i += 21)
      CHECK(p[i] == Approx(w * static_cast<double>(i + 1)).epsilon(1e-5));
  }
  anon_send_exit(shard, caf::exit_reason::user_shutdown);
}

// Dynamic local steps (DyLU, topology.diloco.dynamic_local_steps).

TEST_CASE("dynamic local steps: a round of H x fastest / own steps, rounded, from 1 to H") {
  actors::pace_table t(4);
  const std::vector<bool> all(4, true);
  CHECK(t.next_round(0, 6, all) == 6); // nothing known yet: H
  REQUIRE(t.note(0, 1e-3));
  REQUIRE(t.note(1, 1.05e-3)); // timing noise keeps H
  REQUIRE(t.note(2, 3e-3));
  CHECK(t.next_round(0, 6, all) == 6);
  CHECK(t.next_round(1, 6, all) == 6);
  CHECK(t.next_round(2, 6, all) == 2);
  CHECK(t.next_round(3, 6, all) == 6); // its own pace unknown
  REQUIRE(t.note(3, 0.1));
  CHECK(t.next_round(3, 6, all) == 1); // never below one step
  // The fastest lost: the next fastest sets the pace.
  std::vector<bool> live = all;
  live[0] = false;
  live[1] = false;
  CHECK(t.next_round(2, 6, live) == 6);
  // A bad report is refused and changes nothing.
  CHECK_FALSE(t.note(4, 1e-3));
  CHECK_FALSE(t.note(-1, 1e-3));
  CHECK_FALSE(t.note(2, -1.0));
  CHECK_FALSE(t.note(2, std::nan("")));
  CHECK(t.next_round(2, 6, all) == 2);
}

TEST_CASE("dynamic local steps in a replay: each round as long as the record's pushes say") {
  actors::shard_record r;
  using e = actors::record_entry;
  r.entries = {e{true, 0, 0, 0}, e{false, 0, 5, 0}, e{true, 1, 0, 0}, e{true, 0, 6, 0},
               e{false, 1, 1, 1}, e{false, 0, 7, 1}, e{true, 0, 8, 0}, e{false, 0, 11, 0}};
  const std::vector<std::size_t> rank0{0, 1, 3, 5, 6, 7};
  CHECK(actors::recorded_round(r, rank0, 5, 6) == 2);
  CHECK(actors::recorded_round(r, rank0, 7, 6) == 4);
  CHECK(actors::recorded_round(r, rank0, 11, 6) == 6); // its last push: the fallback
  CHECK(actors::recorded_round(r, rank0, 9, 6) == 6);  // no such push
}

TEST_CASE("dynamic local steps: shard 0 answers paces, and refuses them when off or from an unknown rank") {
  actor_env env;
  caf::scoped_actor self{*env.sys};
  auto ask = [&](const actors::shard_actor& shard, int rank, double pace) {
    std::int64_t len = -1;
    self->request(shard, std::chrono::seconds(10), actors::pace_atom::value, rank, std::int64_t{5}, pace)
      .receive([&](std::int64_t n) { len = n; }, [&](caf::error&) { len = -2; });
    return len;
  };
  auto sc = one_worker_shard(0, false);
  sc.workers = 3;
  sc.ps.local_steps = 6;
  sc.ps.outer = true;
  auto off = actors::spawn_ps_shard(*env.sys, sc, actors::slice::zeros({64}));
  CHECK(ask(off, 0, 1e-3) == -2);
  sc.ps.dynamic_local_steps = true;
  REQUIRE(sc.ps.dynamic());
  auto on = actors::spawn_ps_shard(*env.sys, sc, actors::slice::zeros({64}));
  CHECK(ask(on, 0, 1e-3) == 6);
  CHECK(ask(on, 1, 2e-3) == 3);
  CHECK(ask(on, 3, 1e-3) == -2); // no rank 3 among 3 workers
  CHECK(ask(on, 1, -1.0) == -2);
  CHECK(ask(on, 2, 6e-3) == 1);
  CHECK(fetched(self, on).first == 0); // still serving
  for (auto& s : {off, on})
    anon_send_exit(s, caf::exit_reason::user_shutdown);
}

namespace {

/// Three workers of async DiLoCo in virtual time, the last 3x slower, H = 6.
scheduler::topology_outcome slow_third(bool dynamic, int threads, const models::dataset& data) {
  auto setup = diloco_setup(3, false);
  setup.ps.shards = 1;
  setup.ps.local_steps = 6;
  setup.ps.dynamic_local_steps = dynamic;
  auto vs = constant_compute(1e-3, 3, 1);
  vs.compute.assign(3, vs.compute[0]);
  vs.compute[2].step_s = 3e-3;
  vs.threads = threads;
  return run_virtual(setup, data, vs);
}

} // namespace

TEST_CASE("dynamic local steps: a 3x slower worker takes rounds of 2 steps and pushes as fresh as the others") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 23);
  const auto fixed = slow_third(false, 1, data);
  const auto dyn = slow_third(true, 1, data);
  const auto dyn3 = slow_third(true, 3, data);
  for (const auto* out : {&fixed, &dyn, &dyn3})
    for (const auto& rep : out->reports)
      REQUIRE(rep.error.empty());
  REQUIRE(dyn.reports.size() == 3u);
  for (const auto& rep : fixed.reports) {
    INFO("H = 6 for all: rank " << rep.rank << " staleness " << Catch::Detail::stringify(rep.staleness));
    CHECK(rep.staleness.size() == 5u); // 30 steps in rounds of 6
  }
  for (const auto& rep : dyn.reports)
    UNSCOPED_INFO("dynamic: rank " << rep.rank << " staleness " << Catch::Detail::stringify(rep.staleness));
  CHECK(dyn.reports[0].staleness.size() == 5u);
  CHECK(dyn.reports[1].staleness.size() == 5u);
  CHECK(dyn.reports[2].staleness.size() == 13u); // a first round of 6 (no pace yet), then 12 of 2
  const auto worst_after_first = [](const actors::worker_report& r) {
    return *std::max_element(r.staleness.begin() + 1, r.staleness.end());
  };
  CHECK(worst_after_first(fixed.reports[2]) >= 5); // the fast two push 3 times each per slow round
  CHECK(worst_after_first(dyn.reports[2]) <= 2);   // once each
  CHECK(same_bits(dyn.params, dyn3.params));
  CHECK(dyn.staleness == dyn3.staleness);
  CHECK_FALSE(same_bits(dyn.params, fixed.params));
}

TEST_CASE("dynamic local steps with a shared budget: the slow worker pushes about as often as the fast ones") {
  auto data = make_synthetic(1024, 1, 28, 28, 10, 25);
  auto setup = diloco_setup(3, false);
  setup.ps.shards = 1;
  setup.ps.local_steps = 6;
  setup.steps = 400;
  setup.budget_samples = 3 * 90 * 16; // the samples of 90 steps a worker
  auto vs = constant_compute(1e-3, 3, 1);
  vs.compute.assign(3, vs.compute[0]);
  vs.compute[2].step_s = 3e-3;
  for (bool dynamic : {false, true}) {
    INFO((dynamic ? "dynamic local steps" : "rounds of 6"));
    setup.ps.dynamic_local_steps = dynamic;
    const auto out = run_virtual(setup, data, vs);
    REQUIRE(out.budget_reached);
    std::int64_t samples = 0;
    for (const auto& rep : out.reports) {
      REQUIRE(rep.error.empty());
      samples += rep.samples;
    }
    CHECK(samples >= setup.budget_samples);
    CHECK(samples <= setup.budget_samples + 3 * 16); // each finished at its next step boundary
    const auto& fast = out.reports[0];
    const auto& slow = out.reports[2];
    CHECK(fast.steps > 2 * slow.steps); // the fast workers take more of the budget
    // Pushes: with fixed rounds the slow worker pushes a third as often;
    // with dynamic ones as often, but for its first round of H (no pace yet).
    const auto pushes = [](const actors::worker_report& r) { return static_cast<double>(r.staleness.size()); };
    UNSCOPED_INFO("pushes: fast " << pushes(fast) << ", slow " << pushes(slow));
    if (dynamic)
      CHECK(pushes(slow) >= 0.75 * pushes(fast));
    else
      CHECK(pushes(slow) <= 0.5 * pushes(fast));
  }
}
