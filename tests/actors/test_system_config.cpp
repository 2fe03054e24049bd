// The CAF scheduler settings every actor system here uses: the names are
// ones CAF 0.17 knows (an unknown name is dropped with a line on stderr,
// which a CAF upgrade renaming the option would otherwise leave unnoticed),
// and a system so configured delivers to actors whose threads went idle.
#include "actor_env.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

TEST_CASE("the scheduler settings reach CAF under the names it reads") {
  gwtest::actor_env env(3); // actors::configure_scheduler, as every actor system here
  CHECK(caf::get_or(env.cfg, "scheduler.max-threads", std::size_t{0}) == 3);
  // CAF's default is 500: idle threads that sleep in steps no enqueue ends.
  CHECK(caf::get_or(env.cfg, "work-stealing.moderate-poll-attempts", std::size_t{500}) == 0);
  CHECK(env.sys->scheduler().num_workers() == 3);
}

TEST_CASE("actors whose scheduler threads went idle are woken by each message") {
  gwtest::actor_env env(2);
  auto& sys = *env.sys;
  auto twice = sys.spawn([]() -> caf::behavior { return {[](int x) { return 2 * x; }}; });
  caf::scoped_actor self{sys};
  for (int i = 0; i < 20; ++i) {
    // Long enough for both threads to pass their busy phase and sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(i % 4 == 0 ? 30 : 1));
    int got = -1;
    self->request(twice, std::chrono::seconds(10), i).receive([&](int r) { got = r; },
                                                           [&](caf::error&) { got = -2; });
    REQUIRE(got == 2 * i);
  }
  self->send_exit(twice, caf::exit_reason::user_shutdown);
}
