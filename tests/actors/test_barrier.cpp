// The job barrier's root (actors/barrier.hpp): it releases an epoch once
// every rank arrived or is known to have failed, and a waiter that timed
// out on an epoch it released is told so, with the ranks it went without,
// instead of being handed every rank as missing.
#include "actor_env.hpp"
#include "actors/barrier.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>

using namespace gradwire::actors;

namespace {

std::string missing(caf::scoped_actor& self, const barrier_actor& root, int epoch) {
  std::string names = "(no answer)";
  self->request(root, std::chrono::seconds(10), barrier_missing_atom::value, epoch)
    .receive([&](const std::string& n) { names = n; }, [](caf::error&) {});
  return names;
}

/// Waits for `waiter`'s release of `epoch` (the root sends it to the waiter's actor).
bool released(caf::scoped_actor& waiter, int epoch) {
  bool ok = false;
  waiter->receive([&](barrier_release_atom, int e) { ok = e == epoch; },
                  caf::after(std::chrono::seconds(10)) >> [] {});
  return ok;
}

} // namespace

TEST_CASE("barrier: an epoch is released once every rank is there, and then says it was") {
  gwtest::actor_env env(2);
  barrier_config bc;
  bc.ranks = 3;
  bc.me = 0;
  auto root = spawn_barrier(*env.sys, bc);
  caf::scoped_actor w0{*env.sys}, w1{*env.sys}, w2{*env.sys}, asker{*env.sys};
  // Arrival order varied: 2, 0, then 1 completes it.
  w2->send(root, barrier_atom::value, 0, 2, caf::actor_cast<caf::actor>(w2));
  w0->send(root, barrier_atom::value, 0, 0, caf::actor_cast<caf::actor>(w0));
  CHECK(missing(asker, root, 0) == "1");
  w1->send(root, barrier_atom::value, 0, 1, caf::actor_cast<caf::actor>(w1));
  CHECK(released(w0, 0));
  CHECK(released(w1, 0));
  CHECK(released(w2, 0));
  CHECK(missing(asker, root, 0) == "none: epoch 0 was released, and the release did not reach this waiter");
  CHECK(missing(asker, root, 1) == "0, 1, 2"); // an epoch no one reached
  asker->send_exit(root, caf::exit_reason::user_shutdown);
}

TEST_CASE("barrier: a rank reported failed is not waited for, and the release names it") {
  gwtest::actor_env env(2);
  auto down = std::make_shared<std::atomic<bool>>(false);
  barrier_config bc;
  bc.ranks = 2;
  bc.me = 0;
  bc.is_down = [down](int r) { return r == 1 && down->load(); };
  auto root = spawn_barrier(*env.sys, bc);
  caf::scoped_actor w0{*env.sys}, asker{*env.sys};
  w0->send(root, barrier_atom::value, 0, 0, caf::actor_cast<caf::actor>(w0));
  CHECK(missing(asker, root, 0) == "1");
  *down = true;
  w0->send(root, barrier_recheck_atom::value, 0);
  CHECK(released(w0, 0));
  CHECK(missing(asker, root, 0) ==
        "none: epoch 0 was released without rank(s) 1, reported failed, and the release did not reach this waiter");
  asker->send_exit(root, caf::exit_reason::user_shutdown);
}
