// The parameter server's rules (actors/server_rule.hpp), each through a
// real shard actor: the topology's options choose the rule; DC-ASGD
// corrects a stale gradient by lambda g^2 (w_now - w_read), w_read the
// slice that worker pulled; the staleness lr divides a push's step by its
// staleness; backup workers' late pushes are dropped and counted; a
// checkpoint of delayed Nesterov restores its buffer; the worker's rounds
// (actors/worker_round.hpp) follow the same options. The values are
// computed here independently, step by step.
#include "actors/ps_shard_state.hpp"
#include "actors/server_rule.hpp"
#include "actors/worker_round.hpp"
#include "topology_support.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace gradwire;
using namespace gwtest;

namespace {

constexpr std::int64_t n = 64;

actors::slice filled(float a) {
  auto s = actors::slice::empty({n});
  for (std::int64_t i = 0; i < n; ++i)
    s.data()[i] = a * (1.f + static_cast<float>(i) / static_cast<float>(n));
  return s;
}

struct shard_client {
  caf::scoped_actor& self;
  actors::shard_actor shard;
  std::vector<float> pull(int rank) {
    std::vector<float> out;
    self->request(shard, std::chrono::seconds(10), actors::pull_atom::value, rank, std::int64_t{0}, std::int64_t{0})
      .receive([&](std::int64_t, const actors::slice& p, double) { out = p.to_vector(); },
               [&](caf::error& e) { FAIL(self->system().render(e)); });
    return out;
  }
  std::int64_t push(int rank, std::int64_t base_version, const actors::slice& g) {
    std::int64_t staleness = -99;
    self->request(shard, std::chrono::seconds(10), actors::push_atom::value, rank, base_version, base_version,
                  std::int64_t{8}, g)
      .receive([&](std::int64_t s, std::int64_t) { staleness = s; }, [&](caf::error& e) { FAIL(self->system().render(e)); });
    return staleness;
  }
};

actors::shard_config async_shard(int workers) {
  auto sc = one_worker_shard(0, false);
  sc.end = static_cast<std::size_t>(n);
  sc.workers = workers;
  sc.opt.kind = "sgd";
  sc.opt.lr = 0.5f;
  sc.opt.momentum = 0.f;
  return sc;
}

} // namespace

TEST_CASE("the topology's options choose the shard's rule") {
  auto sc = one_worker_shard(0, true);
  auto name = [&] { return std::string(actors::shard_detail::make_server_rule(sc, 64, actors::slice::zeros({64}))->name()); };
  CHECK(name() == "sync");
  sc.ps.sync = false;
  CHECK(name() == "async");
  sc.ps.local_steps = 4;
  CHECK(name() == "local SGD"); // (local SGD's rounds are lock-step whatever `sync` says)
  sc.ps.outer = true;
  CHECK(name() == "async DiLoCo");
  sc.ps.sync = true;
  CHECK(name() == "DiLoCo");
  auto rule = actors::shard_detail::make_server_rule(sc, 64, actors::slice::zeros({64}));
  CHECK(rule->rounds());
  actors::shard_detail::shard_state st;
  CHECK_THROWS_WITH(rule->apply_push(st, 0, 0, nullptr, 1.f), Catch::Contains("the DiLoCo rule completes rounds"));
}

TEST_CASE("DC-ASGD: a stale gradient is corrected by lambda g^2 (w_now - w_read), w_read the slice its worker pulled") {
  actor_env env;
  caf::scoped_actor self{*env.sys};
  auto sc = async_shard(2);
  sc.ps.dc_lambda = 0.25f;
  const auto w0 = filled(1.f).to_vector(); // (the shard works in the slice it is given)
  shard_client c{self, actors::spawn_ps_shard(*env.sys, sc, filled(1.f))};
  const auto read0 = c.pull(0), read1 = c.pull(1);
  const auto g1 = filled(2.f), g0 = filled(-3.f);
  CHECK(c.push(1, 0, g1) == 0);
  CHECK(c.push(0, 0, g0) == 1); // one version stale: w has moved since rank 0 read it
  const auto w = fetched(self, c.shard).second;
  REQUIRE(w.size() == static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; i += 9) {
    const double a = read1[i], b = g1.data()[i], d = g0.data()[i];
    const double w1 = a - 0.5 * (b + 0.25 * b * b * (a - read1[i])); // fresh: no correction
    const double want = w1 - 0.5 * (d + 0.25 * d * d * (w1 - read0[i]));
    INFO("element " << i);
    CHECK(w[static_cast<std::size_t>(i)] == Approx(want).epsilon(1e-6));
    CHECK(std::abs(want - (w1 - 0.5 * d)) > 1e-4); // the correction is there to see
  }
  anon_send_exit(c.shard, caf::exit_reason::user_shutdown);
}

TEST_CASE("staleness lr: a push s versions stale steps at lr / s, a fresh one at lr") {
  actor_env env;
  caf::scoped_actor self{*env.sys};
  auto sc = async_shard(3);
  sc.ps.staleness_lr = true;
  const auto w0 = filled(1.f).to_vector(); // (the shard works in the slice it is given)
  shard_client c{self, actors::spawn_ps_shard(*env.sys, sc, filled(1.f))};
  const auto g = filled(1.f);
  CHECK(c.push(0, 0, g) == 0);
  CHECK(c.push(1, 0, g) == 1);
  CHECK(c.push(2, 0, g) == 2);
  const auto w = fetched(self, c.shard).second;
  for (std::int64_t i = 0; i < n; i += 9) {
    const double want = w0[i] - 0.5 * g.data()[i] * (1.0 + 1.0 + 0.5);
    CHECK(w[static_cast<std::size_t>(i)] == Approx(want).epsilon(1e-6));
  }
  anon_send_exit(c.shard, caf::exit_reason::user_shutdown);
}

TEST_CASE("backup workers: a version completes without the last push, which is dropped and counted") {
  actor_env env;
  caf::scoped_actor self{*env.sys};
  auto sc = async_shard(3);
  sc.ps.sync = true;
  sc.ps.backup = 1;
  const auto w0 = filled(1.f).to_vector(); // (the shard works in the slice it is given)
  shard_client c{self, actors::spawn_ps_shard(*env.sys, sc, filled(1.f))};
  CHECK(c.push(2, 0, filled(1.f)) == 0);
  CHECK(c.push(0, 0, filled(3.f)) == 0); // two of three: version 1
  CHECK(c.push(1, 0, filled(100.f)) == -1);
  const auto [version, w] = fetched(self, c.shard);
  CHECK(version == 1);
  for (std::int64_t i = 0; i < n; i += 9) // the mean of the two, by samples (8 each)
    CHECK(w[static_cast<std::size_t>(i)] == Approx(w0[i] - 0.5 * 2.0 * w0[i]).epsilon(1e-6));
  std::vector<std::int64_t> dropped;
  self->request(c.shard, std::chrono::seconds(10), actors::stats_atom::value)
    .receive([&](std::int64_t, const actors::histogram&, std::int64_t, const std::vector<std::int64_t>& d) { dropped = d; },
             [&](caf::error& e) { FAIL(env.sys->render(e)); });
  CHECK(dropped == std::vector<std::int64_t>{0, 1, 0});
  anon_send_exit(c.shard, caf::exit_reason::user_shutdown);
}

TEST_CASE("delayed Nesterov's pushes since its last Nesterov step are in a checkpoint, and a malformed one is refused") {
  auto sc = one_worker_shard(0, false);
  sc.ps.local_steps = 4;
  sc.ps.outer = true;
  sc.ps.outer_delay = 3;
  actors::shard_detail::shard_state st;
  st.cfg = sc;
  st.params = actors::slice::zeros({64});
  auto rule = actors::shard_detail::make_server_rule(sc, 64, st.params);
  st.rule = actors::shard_detail::make_server_rule(sc, 64, st.params);
  st.opt = std::make_unique<models::optimizer>(rule->optimizer(sc), 64, kernels::device::cpu());
  st.copies.emplace(0, "shard 0");
  const auto g = filled(1.f);
  st.rule->apply_push(st, 0, 0, g.data(), 1.f); // one plain step, one push held
  actors::snapshot saved;
  saved.who = "shard 0";
  st.rule->save(saved);
  REQUIRE(saved.has("delayed"));
  CHECK(saved.one("delayed_count") == 1);
  rule->restore(saved);
  actors::snapshot again;
  again.who = "shard 0";
  rule->save(again);
  CHECK(again.f("delayed") == saved.f("delayed"));
  actors::snapshot bad;
  bad.who = "shard 0";
  bad.put("delayed", saved.f("delayed"));
  bad.put("delayed_count", std::int64_t{3}); // as many as the delay: never held
  CHECK_THROWS_WITH(rule->restore(bad), Catch::Contains("shard 0: a malformed delayed-Nesterov buffer"));
}

TEST_CASE("the worker's rounds follow its server's rule: what a step pulls, when it pushes, how far it may run ahead") {
  using actors::round_clock;
  actors::ps_options ps;
  auto round = [&](bool compressed = false) { return actors::make_worker_round(ps, compressed); };
  const round_clock at5{5, 20, 0, 0};
  ps.sync = true; // sync: every step, the step's version
  CHECK(round()->wanted_version(at5, 3) == 5);
  CHECK_FALSE(round()->push_pull(at5));
  ps.backup = 1; // backup workers: the version after the last one computed on, the run as long as the versions
  CHECK(round()->wanted_version(at5, 3) == 4);
  CHECK(round()->wanted_version({19, 20, 0, 0}, 20) == 20);
  CHECK(round()->ends_by_versions());
  ps.backup = 0;
  ps.sync = false; // async: whatever the shard holds, push and pull in one but on the last step
  CHECK(round()->wanted_version(at5, 3) == 0);
  CHECK(round()->push_pull(at5));
  CHECK_FALSE(round()->push_pull({19, 20, 0, 0}));
  CHECK(round()->min_clock(at5) == 0);
  ps.staleness_bound = 2; // SSP: no more than bound steps ahead of the slowest, no push-pull
  CHECK(round()->min_clock(at5) == 3);
  CHECK_FALSE(round()->push_pull(at5));
  ps.staleness_bound = -1;
  ps.sync = true;
  ps.local_steps = 4; // local SGD: rounds of 4, the round's average, parameters pushed (their change if compressed)
  CHECK(round()->local_steps() == 4);
  CHECK(round()->begins({8, 20, 0, 0}));
  CHECK_FALSE(round()->begins({9, 20, 0, 0}));
  CHECK(round()->ends({11, 20, 0, 0}));
  CHECK(round()->ends({19, 20, 0, 0}));
  CHECK_FALSE(round()->ends({12, 20, 0, 0}));
  CHECK(round()->wanted_version({9, 20, 0, 0}, 0) == 2);
  CHECK_FALSE(round()->pushes_pseudo());
  CHECK(round(true)->pushes_pseudo());
  ps.sync = false;
  ps.outer = true;
  ps.dynamic_local_steps = true; // async DiLoCo, dynamic: rounds as long as shard 0 said, pseudo-gradients
  CHECK(round()->pushes_pseudo());
  CHECK(round()->begins({7, 20, 7, 2}));
  CHECK_FALSE(round()->begins({8, 20, 7, 2}));
  CHECK(round()->ends({8, 20, 7, 2}));
  CHECK_FALSE(round()->ends({7, 20, 7, 2}));
  CHECK(round()->sends_pace({8, 20, 7, 2}));
  CHECK_FALSE(round()->sends_pace({19, 20, 18, 2}));
}
