// Parameter server as CAF actors in one process: real shards and detached
// workers exchanging pull/push messages.
#include "actors/ps_shard.hpp"
#include "actors/shard_copies.hpp"
#include "kernels/error.hpp"
#include "models/batcher.hpp"
#include "models/model.hpp"
#include "reference.hpp"
#include "topology_support.hpp"
#include "scheduler/runtime/ps_wiring.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <thread>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;
using scheduler::topology_setup;


TEST_CASE("sync PS: N workers at batch b equal one worker at batch N*b, step by step") {
  actor_env env;
  auto data = make_synthetic(512, 1, 28, 28, 10, 3);
  for (int shards : {1, 3}) {
    INFO(shards << " shard(s)");
    auto setup = small_setup(2, shards, true);
    auto out = scheduler::run_topology(*env.sys, setup, data);
    gwtest::check_close(out.params, joint_batch_reference(setup, data), 1e-4, 1e-5);
    // Every push of a sync step is applied at the version it was computed on.
    REQUIRE(!out.staleness.empty());
    CHECK(out.staleness[0] == 2 * setup.steps * shards);
    CHECK(std::accumulate(out.staleness.begin(), out.staleness.end(), std::int64_t{0}) == out.staleness[0]);
    for (const auto& rep : out.reports) {
      CHECK(rep.error.empty());
      CHECK(rep.steps == setup.steps);
      CHECK(rep.samples == setup.steps * 16);
    }
  }
}

TEST_CASE("async PS: every push applied once, staleness recorded, loss falls") {
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 4);
  auto setup = small_setup(4, 2, false);
  setup.steps = 30;
  // Plain SGD: with momentum 0.9 at lr 0.05, gradients ~1.5 versions stale
  // did not learn (loss 2.33 -> 2.19); asynchrony adds implicit momentum.
  // Momentum 0: 2.33 -> 0.08; momentum 0.9 at lr 0.01: 2.33 -> 0.17.
  setup.opt.momentum = 0.f;
  auto out = scheduler::run_topology(*env.sys, setup, data);
  const auto pushes = std::accumulate(out.staleness.begin(), out.staleness.end(), std::int64_t{0});
  CHECK(pushes == 4 * 30 * 2);
  std::int64_t recorded = 0;
  for (const auto& rep : out.reports) {
    CHECK(rep.error.empty());
    recorded += static_cast<std::int64_t>(rep.staleness.size());
  }
  CHECK(recorded == pushes);
  // Four workers interleave: pushes are applied on top of others' updates.
  CHECK(mean_staleness(out.staleness) > 0.3);
  CHECK(out.staleness.size() <= 4 * 30); // bounded by the pushes that can intervene
  const auto [before, after] = losses(setup, out.params, data);
  INFO("loss before " << before << ", after " << after << ", mean staleness " << mean_staleness(out.staleness));
  CHECK(after < 0.8 * before);
}

TEST_CASE("async PS: push-pull (parameters in the push's reply) trains one worker exactly as separate pulls do") {
  // With one worker the parameters a pull would fetch are those the push's
  // reply carries: the same model bit for bit, staleness 0 throughout.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 5);
  auto setup = small_setup(1, 2, false);
  setup.steps = 12;
  setup.ps.push_pull = true;
  auto fused = scheduler::run_topology(*env.sys, setup, data);
  setup.ps.push_pull = false;
  auto separate = scheduler::run_topology(*env.sys, setup, data);
  REQUIRE(fused.reports.size() == 1);
  CHECK(fused.reports[0].error.empty());
  CHECK(separate.reports[0].error.empty());
  CHECK(fused.reports[0].staleness == std::vector<std::int64_t>(12 * 2, 0));
  CHECK(fused.params == separate.params);
}

TEST_CASE("a push-pull to a sync shard is refused with an error naming the shard, which carries on") {
  actor_env env;
  auto shard = actors::spawn_ps_shard(*env.sys, one_worker_shard(3, true), actors::slice::zeros({64}));
  caf::scoped_actor self{*env.sys};
  std::string error;
  self->request(shard, std::chrono::seconds(10), actors::push_pull_atom::value, 0, std::int64_t{0}, std::int64_t{0},
                std::int64_t{16}, actors::slice::zeros({64}))
    .receive([&](std::int64_t, std::int64_t, const actors::slice&) { error = "answered"; },
             [&](caf::error& e) { error = env.sys->render(e); });
  CHECK_THAT(error, Catch::Contains("shard 3") && Catch::Contains("sync") && Catch::Contains("async only"));
  std::int64_t version = -1;
  self->request(shard, std::chrono::seconds(10), actors::push_atom::value, 0, std::int64_t{0}, std::int64_t{0},
                std::int64_t{16}, actors::slice::zeros({64}))
    .receive([&](std::int64_t, std::int64_t v) { version = v; }, [&](caf::error& e) { FAIL(env.sys->render(e)); });
  CHECK(version == 1); // the refused push-pull changed nothing
  anon_send_exit(shard, caf::exit_reason::user_shutdown);
}

TEST_CASE("sync PS with unequal batch sizes equals one batch of all their samples") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 6);
  auto setup = small_setup(2, 2, true);
  setup.worker_batch = {16, 48};
  setup.steps = 6;
  auto out = scheduler::run_topology(*env.sys, setup, data);
  gwtest::check_close(out.params, joint_batch_reference(setup, data), 1e-4, 1e-5);
  CHECK(out.reports[1].samples == 3 * out.reports[0].samples);
}

TEST_CASE("sync PS and local SGD at 3, 4 and 5 workers give the same model bit for bit, whatever order the pushes arrive in") {
  // A float sum depends on its order from three terms on: the shard sums
  // in rank order. Each worker in turn is slowed, so that its pushes
  // arrive last, round after round.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 5);
  for (int workers : {3, 4, 5})
    for (bool local : {false, true}) {
      INFO(workers << " workers, " << (local ? "local SGD (H = 1)" : "sync PS"));
      auto setup = small_setup(workers, 2, !local);
      if (local) {
        setup.family = &scheduler::local_sgd_family;
        setup.ps.local_steps = 1;
      }
      std::vector<std::vector<float>> models;
      for (int slow = -1; slow < workers; ++slow) {
        setup.worker_delay_ms.assign(static_cast<std::size_t>(workers), 0.0);
        if (slow >= 0)
          setup.worker_delay_ms[static_cast<std::size_t>(slow)] = 4.0;
        models.push_back(scheduler::run_topology(*env.sys, setup, data).params);
      }
      for (std::size_t k = 1; k < models.size(); ++k) {
        INFO("worker " << k - 1 << " slowed");
        CHECK(models[k] == models[0]);
      }
    }
}

TEST_CASE("async PS: a slowed worker's gradients are staler than the others'") {
  actor_env env;
  auto data = make_synthetic(4096, 1, 28, 28, 10, 7);
  auto setup = small_setup(3, 1, false);
  setup.spec.hidden = {256, 128}; // compute (what slowdown multiplies) must dominate messaging
  setup.batch_size = 64;
  setup.opt.momentum = 0.f;
  setup.steps = 10;
  // A fixed 300 ms per step, not a multiple of a compute time that other
  // tests running beside this one can stretch. The fast ones take ~1 ms, and
  // up to ~25 ms under ASan beside another test, where 50 ms let the slow
  // one see only 6 pushes a step against the fast ones' 3: its first step
  // now spans 20 or more of theirs even then.
  setup.worker_delay_ms = {0.0, 0.0, 300.0};
  auto out = scheduler::run_topology(*env.sys, setup, data);
  auto max_of = [](const std::vector<std::int64_t>& v) {
    return v.empty() ? std::int64_t{0} : *std::max_element(v.begin(), v.end());
  };
  const auto fast = std::max(max_of(out.reports[0].staleness), max_of(out.reports[1].staleness));
  const auto slow = max_of(out.reports[2].staleness);
  INFO("max staleness: fast workers " << fast << ", slow worker " << slow);
  // While the slow worker computes one batch, the two fast ones push tens
  // of times. (Its mean is diluted: once the fast workers are done, its last
  // pushes meet no one.)
  CHECK(slow > 2 * std::max<std::int64_t>(fast, 1));
}

TEST_CASE("async PS with a shared budget: the fast workers take more of it, the total is the budget") {
  actor_env env;
  auto data = make_synthetic(4096, 1, 28, 28, 10, 8);
  auto setup = small_setup(3, 1, false);
  setup.batch_size = 16;
  setup.budget_samples = 6400; // 400 steps of 16 in all
  setup.steps = 400;           // what a worker may do at most: all of it
  setup.worker_delay_ms = {0.0, 0.0, 20.0};
  auto out = scheduler::run_topology(*env.sys, setup, data);
  CHECK(out.budget_reached);
  CHECK_FALSE(out.interrupted);
  std::int64_t total = 0;
  for (const auto& rep : out.reports) {
    CHECK(rep.error.empty());
    // Told to stop, a worker ends at once: a batch it was computing counts
    // as samples, not as a step.
    CHECK(rep.samples >= rep.steps * setup.batch_size);
    CHECK(rep.samples <= (rep.steps + 1) * setup.batch_size);
    total += rep.samples;
  }
  INFO("steps: " << out.reports[0].steps << ", " << out.reports[1].steps << ", slow " << out.reports[2].steps);
  // Past the budget by what the workers did while the coordinator heard of
  // it: a step or two each on an idle machine, up to 8% of it with the
  // rest of the suite beside it on 2 cores (5% was exceeded there once).
  CHECK(total >= setup.budget_samples);
  CHECK(total <= setup.budget_samples + setup.budget_samples / 8);
  CHECK(out.reports[0].steps > 3 * out.reports[2].steps);
  CHECK(out.reports[1].steps > 3 * out.reports[2].steps);
}

TEST_CASE("a worker's lr_scale applies to its pushes: one async worker at lr x 0.5 is one at half the lr, bit for bit") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 9);
  auto setup = small_setup(1, 2, false);
  setup.steps = 12;
  setup.opt.lr = 0.1f;
  setup.worker_lr_scale = {0.5};
  const auto scaled = scheduler::run_topology(*env.sys, setup, data);
  setup.opt.lr = 0.05f;
  setup.worker_lr_scale.clear();
  const auto halved = scheduler::run_topology(*env.sys, setup, data);
  CHECK(scaled.params == halved.params);
  setup.opt.lr = 0.1f;
  const auto full = scheduler::run_topology(*env.sys, setup, data);
  CHECK(full.params != halved.params);
}

TEST_CASE("local SGD averaging every step equals synchronous SGD (momentum included)") {
  // Averaging after each local SGD-momentum step is linear in the updates:
  // mean(w - lr v_r) with v_r = mu v_r + g_r evolves as one optimizer fed
  // the mean gradient, i.e. as the sync parameter server.
  actor_env env;
  auto data = make_synthetic(512, 1, 28, 28, 10, 8);
  auto sync = small_setup(3, 2, true);
  auto local = sync;
  local.family = &scheduler::local_sgd_family;
  local.ps.local_steps = 1;
  auto a = scheduler::run_topology(*env.sys, sync, data);
  auto b = scheduler::run_topology(*env.sys, local, data);
  gwtest::check_close(b.params, a.params, 1e-4, 1e-5);
}

TEST_CASE("local SGD with H = 4: parameters exchanged every 4 steps, and it learns") {
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 9);
  auto setup = small_setup(2, 1, true);
  setup.family = &scheduler::local_sgd_family;
  setup.ps.local_steps = 4;
  setup.steps = 18; // 4 full rounds and a partial one of 2
  setup.opt.lr = 0.02f;
  auto out = scheduler::run_topology(*env.sys, setup, data);
  for (const auto& rep : out.reports) {
    CHECK(rep.error.empty());
    CHECK(rep.steps == 18);
    CHECK(rep.staleness.size() == 5); // one exchange per round
  }
  const auto [before, after] = losses(setup, out.params, data);
  INFO("loss before " << before << ", after " << after);
  CHECK(after < 0.8 * before);
}

TEST_CASE("DiLoCo with outer lr 1 and no momentum is local SGD, to rounding, after 240 steps at 3 workers") {
  // The outer step w - 1 * (w - mean) rounds differently from the mean
  // itself, and nothing special-cases those values: the two runs agree to
  // rounding that 30 rounds of AdamW inner steps carry along.
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 12);
  auto local = small_setup(3, 2, true);
  local.family = &scheduler::local_sgd_family;
  local.ps.local_steps = 8;
  local.steps = 240;
  local.opt.kind = "adamw";
  local.opt.lr = 1e-3f;
  local.opt.weight_decay = 0.01f;
  auto diloco = local;
  diloco.family = &scheduler::diloco_family;
  diloco.ps.outer = true;
  diloco.ps.outer_lr = 1.f;
  diloco.ps.outer_momentum = 0.f;
  const auto a = scheduler::run_topology(*env.sys, local, data);
  const auto b = scheduler::run_topology(*env.sys, diloco, data);
  CHECK(a.params != b.params); // not the same code path
  gwtest::check_close(b.params, a.params, 1e-5, 1e-6);
  // With DiLoCo's outer Nesterov step (lr 0.7, momentum 0.9) it is another run, and it learns.
  diloco.ps.outer_lr = 0.7f;
  diloco.ps.outer_momentum = 0.9f;
  const auto c = scheduler::run_topology(*env.sys, diloco, data);
  for (const auto& rep : c.reports)
    CHECK(rep.error.empty());
  const auto [before, after] = losses(diloco, c.params, data);
  INFO("loss before " << before << ", after " << after);
  CHECK(after < 0.5 * before);
  double differ = 0;
  for (std::size_t i = 0; i < c.params.size(); ++i)
    differ = std::max(differ, static_cast<double>(std::abs(c.params[i] - a.params[i])));
  CHECK(differ > 1e-3);
}

TEST_CASE("DiLoCo's outer step needs topology kind diloco, and local SGD's averaging the other") {
  actor_env env;
  auto data = make_synthetic(256, 1, 28, 28, 10, 13);
  auto setup = small_setup(2, 1, true);
  setup.family = &scheduler::local_sgd_family;
  setup.ps.local_steps = 2;
  setup.ps.outer = true;
  CHECK_THROWS_WITH(scheduler::run_topology(*env.sys, setup, data), Catch::Contains("topology.kind = \"diloco\""));
}

TEST_CASE("a run far longer than the timeout succeeds: silence, not duration, is the failure") {
  actor_env env;
  auto data = make_synthetic(4096, 1, 28, 28, 10, 10);
  auto setup = small_setup(2, 1, true); // the small model: the delay is the step
  setup.steps = 40;
  setup.worker_delay_ms = {40.0, 40.0}; // ~40 ms a step: ~1.6 s in all (a fixed delay: a slowdown
                                        // multiplier would also multiply contention from other tests)
  // 25 steps to a timeout: a step of a 256-128 MLP at batch 64 under TSan
  // beside another test took over 500 ms (12 steps) once.
  setup.timeout = std::chrono::milliseconds(1000);
  std::int64_t last_steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto out = scheduler::run_topology(*env.sys, setup, data,
                                             [&](std::int64_t steps, std::int64_t) { last_steps = steps; });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("ran " << secs << " s with a 1 s timeout");
  CHECK(secs > 1.2);
  CHECK(last_steps == 2 * 40);
  for (const auto& rep : out.reports)
    CHECK(rep.steps == 40);
}

TEST_CASE("a coordinator held up past the timeout reads the steps waiting for it before it calls anyone silent") {
  // A loaded machine can keep the coordinator's thread from running for
  // longer than the timeout while the workers go on stepping. Here its
  // progress callback holds it 1.5 s (the timeout is 1 s) once, at the 10th
  // step: both workers' steps meanwhile wait in its mailbox, and neither
  // worker was silent.
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 10);
  auto setup = small_setup(2, 1, false); // async: the workers do not wait for each other
  setup.steps = 60;
  setup.worker_delay_ms = {40.0, 40.0};
  setup.timeout = std::chrono::milliseconds(1000);
  bool held = false;
  std::int64_t last_steps = 0;
  auto out = scheduler::run_topology(*env.sys, setup, data, [&](std::int64_t steps, std::int64_t) {
    last_steps = steps;
    if (!held && steps >= 10) {
      held = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    }
  });
  CHECK(held);
  CHECK(last_steps == 2 * 60);
  for (const auto& rep : out.reports) {
    CHECK(rep.error.empty());
    CHECK(rep.steps == 60);
  }
}

TEST_CASE("a worker silent for longer than the timeout is reported by rank") {
  actor_env env;
  auto data = make_synthetic(2048, 1, 28, 28, 10, 11);
  auto setup = small_setup(2, 1, true);
  setup.steps = 3;
  // Rank 1: 2 s a step with no heartbeat meanwhile. A fixed delay, not a
  // slowdown: 2000x its compute was 56 s of sleep in CI, more under ASan.
  // Rank 0 computes the small model: with a 256-128 MLP at batch 64 its
  // first step, under TSan beside other tests and a busy loop on 2 cores,
  // took past the 300 ms itself, and rank 0 was named.
  setup.worker_delay_ms = {0.0, 2000.0};
  setup.timeout = std::chrono::milliseconds(300);
  CHECK_THROWS_WITH(scheduler::run_topology(*env.sys, setup, data),
                    Catch::Contains("worker rank 1 silent for 300 ms"));
}

TEST_CASE("SSP: the fastest worker is never more than bound + 1 steps ahead of the slowest") {
  actor_env env;
  auto data = make_synthetic(4096, 1, 28, 28, 10, 12);
  auto setup = small_setup(3, 2, false);
  setup.spec.hidden = {256, 128};
  setup.batch_size = 64;
  setup.opt.momentum = 0.f;
  setup.steps = 12;
  // A fixed 30 ms a step for rank 2 (a slowdown scales its own measured
  // compute, which contention beside other tests can shrink relative to
  // the others': unbounded, the fast workers then got only 4 steps ahead).
  setup.worker_delay_ms = {0.0, 0.0, 30.0};
  // The recorded staleness (in shard versions, one per push) follows from
  // the rule: while a worker computes on what it read after k pushes of its
  // own (every worker had made k - bound), each of the other 2 can push at
  // most 2 bound + 1 times before it has to wait for this one.
  auto max_staleness = [](const actors::histogram& h) {
    std::int64_t m = 0;
    for (std::size_t i = 0; i < h.size(); ++i)
      if (h[i] > 0)
        m = static_cast<std::int64_t>(i);
    return m;
  };
  auto unbounded = scheduler::run_topology(*env.sys, setup, data);
  for (int bound : {0, 1, 3}) {
    INFO("bound " << bound);
    setup.ps.staleness_bound = bound;
    auto out = scheduler::run_topology(*env.sys, setup, data);
    CHECK(out.max_clock_gap <= bound + 1);
    CHECK(max_staleness(out.staleness) <= (2 * bound + 1) * 2);
    for (const auto& rep : out.reports)
      CHECK(rep.steps == 12);
  }
  INFO("without a bound the fast workers ran " << unbounded.max_clock_gap << " steps ahead, staleness up to "
                                               << max_staleness(unbounded.staleness));
  CHECK(unbounded.max_clock_gap > 4);
  CHECK(max_staleness(unbounded.staleness) > 2); // what bound 0 allows
}

TEST_CASE("a worker that cannot run ends the run with an error naming its rank") {
  actor_env env;
  auto data = make_synthetic(40, 1, 28, 28, 10, 5); // 20 samples a worker: no batch of 32
  auto setup = small_setup(2, 1, true);
  setup.batch_size = 32;
  CHECK_THROWS_WITH(scheduler::run_topology(*env.sys, setup, data),
                    Catch::Contains("worker") && Catch::Contains("no full batch of 32"));
}

TEST_CASE("shard ranges cover the buffer with 16-aligned edges") {
  auto r = scheduler::shard_ranges(1000, 3);
  REQUIRE(r.size() == 3);
  CHECK(r[0].first == 0);
  CHECK(r[2].second == 1000);
  for (std::size_t i = 0; i + 1 < r.size(); ++i) {
    CHECK(r[i].second == r[i + 1].first);
    CHECK(r[i].second % 16 == 0);
  }
}

TEST_CASE("a pinned shard version is kept until asked for however far the shard has moved on") {
  // Checkpoints by time: the coordinator pins a version before the workers
  // go on and asks for it once every worker's part is in, which on a busy
  // machine can be many versions later. Without the pin only the last two
  // multiples of snapshot_every_versions are kept.
  actor_env env;
  auto sc = one_worker_shard(2, true);
  sc.snapshot_every_versions = 2;
  auto shard = actors::spawn_ps_shard(*env.sys, sc, actors::slice::zeros({64}));
  caf::scoped_actor self{*env.sys};
  std::int64_t version = 0;
  auto push_to = [&](std::int64_t to) {
    while (version < to)
      self->request(shard, std::chrono::seconds(10), actors::push_atom::value, 0, version, version + 1, std::int64_t{16},
                    actors::slice::from(std::vector<float>(64, 0.5f), {64}))
        .receive([&](std::int64_t, std::int64_t) { ++version; }, [&](caf::error& e) { FAIL(env.sys->render(e)); });
  };
  struct part {
    std::string meta;
    std::vector<float> floats;
    std::string error;
  };
  auto ask = [&](std::int64_t v) {
    part p;
    self->request(shard, std::chrono::seconds(10), actors::snapshot_atom::value, v)
      .receive([&](const std::string& m, const actors::slice& f) { p = {m, f.to_vector(), ""}; },
               [&](caf::error& e) { p.error = env.sys->render(e); });
    return p;
  };
  auto pin = [&](std::int64_t v) { self->send(shard, actors::pin_atom::value, v); };

  push_to(1);
  pin(3); // ahead: taken when the shard gets there
  pin(1); // the version it is at: taken now
  push_to(3);
  const auto at3 = ask(-1);
  REQUIRE(at3.error.empty());
  push_to(12);
  const auto three = ask(3);
  REQUIRE(three.error.empty());
  CHECK(three.meta == at3.meta);
  CHECK(three.floats == at3.floats);
  CHECK(ask(1).error.empty());
  CHECK_THAT(ask(3).error, Catch::Contains("shard 2") && Catch::Contains("no snapshot of version 3")); // let go once taken
  CHECK_THAT(ask(5).error, Catch::Contains("no snapshot of version 5"));                             // neither pinned nor kept
  CHECK(ask(10).error.empty());                                                                        // the last two multiples of 2
  // At most max_pins wait: the oldest of more are let go.
  for (std::int64_t v = 13; v < 13 + static_cast<std::int64_t>(actors::shard_copies::max_pins) + 2; ++v)
    pin(v);
  push_to(20);
  CHECK_THAT(ask(13).error, Catch::Contains("no snapshot of version 13"));
  CHECK(ask(15).error.empty());
  CHECK(ask(17).error.empty());
  anon_send_exit(shard, caf::exit_reason::user_shutdown);
}
