// The CAF scheduler settings every actor system here uses: the names are
// ones CAF 0.17 knows (an unknown name is dropped with a line on stderr,
// which a CAF upgrade renaming the option would otherwise leave unnoticed),
// and a system so configured delivers to actors whose threads went idle.
#include "actors/system_config.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace gradwire;

TEST_CASE("the scheduler settings reach CAF under the names it reads") {
  caf::actor_system_config cfg;
  actors::configure_scheduler(cfg, 3);
  CHECK(caf::get_or(cfg, "scheduler.max-threads", std::size_t{0}) == 3);
  // CAF's default is 500: idle threads that sleep in steps no enqueue ends.
  CHECK(caf::get_or(cfg, "work-stealing.moderate-poll-attempts", std::size_t{500}) == 0);
  caf::actor_system sys{cfg};
  CHECK(sys.scheduler().num_workers() == 3);
}

TEST_CASE("actors whose scheduler threads went idle are woken by each message") {
  caf::actor_system_config cfg;
  actors::configure_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
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
