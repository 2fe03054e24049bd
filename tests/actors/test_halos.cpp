// HALoS's local server (actors/halos_rule.hpp) through a real shard actor
// whose global server is a stand-in that holds each exchange until the
// test answers it: what the local server sends (its progress since the
// last merge, the global version it last heard, its exchange count, its
// group), that its workers' pushes go on while an exchange is in flight,
// and how the answer is merged. Local lr 1 without momentum, so every
// value is computed here by hand and exact in float.
#include "actors/halos_rule.hpp"
#include "actors/ps_shard.hpp"
#include "actors/server_rule.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

using namespace gradwire;

namespace {

using answer_atom = caf::atom_constant<caf::atom("answer")>;
using seen_atom = caf::atom_constant<caf::atom("seen")>;

/// One exchange as the stand-in got it.
struct exchange_seen {
  int group = -1;
  std::int64_t base_version = -1, step = -1;
  std::vector<float> delta;
};

struct stand_in_state {
  std::vector<exchange_seen> seen;
  caf::response_promise held;
};

/// The global server's stand-in: keeps each exchange's promise until
/// (answer, version, params), and tells (seen, i) what exchange i carried.
caf::behavior stand_in(caf::stateful_actor<stand_in_state>* self) {
  return {
    [=](actors::push_pull_atom, int group, std::int64_t base, std::int64_t step, std::int64_t, actors::slice d) {
      self->state.seen.push_back({group, base, step, d.to_vector()});
      self->state.held = self->make_response_promise();
      return self->state.held;
    },
    [=](answer_atom, std::int64_t version, actors::slice global) {
      self->state.held.deliver(std::int64_t{0}, version, std::move(global));
    },
    [=](seen_atom, std::int64_t i) -> caf::result<int, std::int64_t, std::int64_t, std::vector<float>> {
      if (i >= static_cast<std::int64_t>(self->state.seen.size()))
        return {-1, -1, -1, std::vector<float>{}};
      const auto& e = self->state.seen[static_cast<std::size_t>(i)];
      return {e.group, e.base_version, e.step, e.delta};
    },
  };
}

actors::slice of(std::vector<float> v) {
  auto s = actors::slice::empty({static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), s.data());
  return s;
}

struct halos_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor global = sys.spawn(stand_in);
  actors::shard_actor local;
  std::int64_t version = 0;

  explicit halos_fixture(float alpha) {
    actors::halos_options o;
    o.local_lr = 1.f;
    o.local_momentum = 0.f;
    o.exchange_every = 2;
    o.merge_alpha = alpha;
    actors::shard_config sc;
    sc.end = 3;
    sc.workers = 1;
    sc.ps.sync = false;
    sc.ps.local_steps = 4;
    sc.ps.outer = true;
    const actors::halos_link up{actors::as_shard(global), 1, std::chrono::seconds(30)};
    sc.make_rule = [o, up](std::size_t len, const actors::slice& init) { return actors::make_halos_rule(o, up, len, init); };
    local = actors::spawn_ps_shard(sys, sc, actors::slice::zeros({3}));
  }
  ~halos_fixture() {
    self->send_exit(local, caf::exit_reason::user_shutdown);
    self->send_exit(global, caf::exit_reason::user_shutdown);
  }
  /// Worker 0 pushes `g`: the local parameters after it.
  std::vector<float> push(std::vector<float> g) {
    std::vector<float> out;
    self->request(local, std::chrono::seconds(10), actors::push_pull_atom::value, 0, version, version, std::int64_t{8},
                  of(std::move(g)))
      .receive([&](std::int64_t, std::int64_t v, const actors::slice& p) { version = v, out = p.to_vector(); },
               [&](caf::error& e) { FAIL(sys.render(e)); });
    return out;
  }
  exchange_seen seen(std::int64_t i) {
    exchange_seen e;
    self->request(global, std::chrono::seconds(10), seen_atom::value, i)
      .receive([&](int g, std::int64_t b, std::int64_t s, std::vector<float> d) { e = {g, b, s, std::move(d)}; },
               [&](caf::error& err) { FAIL(sys.render(err)); });
    return e;
  }
  /// The local parameters once the local version reaches `v` (a merge
  /// lands when the shard takes the stand-in's answer, after the reply
  /// that caused it).
  std::vector<float> fetch_at(std::int64_t v) {
    for (int tries = 0; tries < 10000; ++tries) {
      std::vector<float> out;
      std::int64_t at = -1;
      self->request(local, std::chrono::seconds(10), actors::fetch_atom::value)
        .receive([&](std::int64_t got, const actors::slice& p) { at = got, out = p.to_vector(); },
                 [&](caf::error& e) { FAIL(sys.render(e)); });
      if (at >= v)
        return out;
      std::this_thread::yield();
    }
    FAIL("the local server never reached version " << v);
    return {};
  }
};

} // namespace

TEST_CASE("a HALoS local server sends its progress every exchange_every pushes and keeps serving") {
  halos_fixture f(0.5f);
  CHECK(f.push({1, 2, 3}) == std::vector<float>{-1, -2, -3});
  CHECK(f.seen(0).group == -1); // one push: nothing sent yet
  CHECK(f.push({1, 1, 1}) == std::vector<float>{-2, -3, -4});
  auto first = f.seen(0);
  CHECK(first.group == 1);
  CHECK(first.base_version == 0);
  CHECK(first.step == 0);
  CHECK(first.delta == std::vector<float>{2, 3, 4}); // base (the initial 0) minus local
  // The exchange is in flight: the workers' pushes are taken meanwhile.
  CHECK(f.push({1, 1, 1}) == std::vector<float>{-3, -4, -5});
  CHECK(f.seen(1).group == -1);

  SECTION("the answer is merged as local += alpha (global - local at the send)") {
    f.self->send(f.global, answer_atom::value, std::int64_t{7}, of({-10, -10, -10}));
    // sent = (-2, -3, -4): local = (-3, -4, -5) + 0.5 ((-10, -10, -10) - sent)
    CHECK(f.fetch_at(4) == std::vector<float>{-7, -7.5f, -8});
    // The next progress counts from the merged send point, sent + 0.5 (global - sent) =
    // (-6, -6.5, -7): the push made during the exchange, and the one now.
    CHECK(f.push({1, 0, 0}) == std::vector<float>{-8, -7.5f, -8});
    auto second = f.seen(1);
    CHECK(second.group == 1);
    CHECK(second.base_version == 7); // the global version it last heard
    CHECK(second.step == 1);
    CHECK(second.delta == std::vector<float>{2, 1, 1});
  }
}

TEST_CASE("with merge_alpha 1 a HALoS local server takes the global model plus its progress during the exchange") {
  halos_fixture f(1.f);
  f.push({1, 1, 1});
  f.push({1, 1, 1}); // sent: (-2, -2, -2)
  f.push({0, 1, 2}); // during the exchange: (-2, -3, -4)
  f.self->send(f.global, answer_atom::value, std::int64_t{3}, of({-5, -6, -7}));
  CHECK(f.fetch_at(4) == std::vector<float>{-5, -7, -9});
}

TEST_CASE("a HALoS local server whose global server answers a malformed slice fails naming its group") {
  halos_fixture f(1.f);
  f.self->monitor(f.local);
  f.push({1, 1, 1});
  f.push({1, 1, 1});
  f.self->send(f.global, answer_atom::value, std::int64_t{1}, of({1, 2}));
  std::string why;
  f.self->receive([&](const caf::down_msg& d) { why = f.sys.render(d.reason); },
                  caf::after(std::chrono::seconds(30)) >> [&] { why = "no exit"; });
  CHECK_THAT(why, Catch::Contains("HALoS local server of group 1") && Catch::Contains("2 floats for a slice of 3"));
}
