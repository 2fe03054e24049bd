// Waits that a stop of this process does not use up (kernels/stop_aware):
// real stops (SIGSTOP, then SIGCONT from the test) of forked children.
#include "kernels/stop_aware.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

using namespace std::chrono;
using gradwire::kernels::last_stop_end;
using gradwire::kernels::last_stop_length;
using gradwire::kernels::waited;
using gradwire::kernels::watch_stops;

namespace {

long ms(steady_clock::duration d) { return static_cast<long>(duration_cast<milliseconds>(d).count()); }

/// Runs `child` in a forked process, which exits with its result (0: it
/// held); with `stop_for`, the test stops it (once it has stopped itself)
/// that long before letting it go on. Returns the child's exit status.
template <typename F>
int in_child(F child, milliseconds stop_for = milliseconds(0)) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0)
    std::_Exit(child());
  int st = 0;
  if (stop_for.count() > 0) {
    REQUIRE(::waitpid(pid, &st, WUNTRACED) == pid); // it stopped itself (a step of the child, not a timed guess)
    REQUIRE(WIFSTOPPED(st));
    std::this_thread::sleep_for(stop_for);
    ::kill(pid, SIGCONT);
  }
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  REQUIRE(WIFEXITED(st));
  return WEXITSTATUS(st);
}

} // namespace

TEST_CASE("a stop of this process does not count in waited(): its waits get a fresh start when it runs again") {
  watch_stops();
  const int code = in_child(
    [] {
      const auto t0 = steady_clock::now();
      (void)waited(t0);
      std::this_thread::sleep_for(milliseconds(100));
      ::raise(SIGSTOP); // stopped here for 800 ms by the test
      const auto w = waited(t0);
      const auto ran = steady_clock::now() - t0;
      std::fprintf(stderr, "after the stop: waited %ld ms of %ld ms; the stop was seen as %ld ms, ending %ld ms ago\n",
                   ms(w), ms(ran), ms(last_stop_length()), ms(steady_clock::now() - last_stop_end()));
      return ran > milliseconds(800) && w < milliseconds(200) && last_stop_length() > milliseconds(700) &&
                 last_stop_end() > t0
               ? 0
               : 1;
    },
    milliseconds(800));
  CHECK(code == 0);
}

TEST_CASE("a forked child's waits count its running time in full: it watches with a thread of its own") {
  watch_stops(); // the parent's thread, which the child does not have
  const int code = in_child([] {
    const auto t0 = steady_clock::now();
    (void)waited(t0);
    std::this_thread::sleep_for(milliseconds(600)); // running (asleep), not stopped
    const auto w = waited(t0);
    std::fprintf(stderr, "a child that ran 600 ms: waited %ld ms\n", ms(w));
    return w >= milliseconds(590) ? 0 : 1;
  });
  CHECK(code == 0);
}

TEST_CASE("a wait begun after the last stop counts from its own start") {
  const auto t0 = steady_clock::now();
  std::this_thread::sleep_for(milliseconds(50));
  const auto w = waited(t0);
  CHECK(w >= milliseconds(50));
  CHECK(w <= steady_clock::now() - t0);
  CHECK(waited(steady_clock::now() + seconds(1)) < steady_clock::duration::zero()); // (a start ahead: negative)
}
