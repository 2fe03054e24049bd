// Waits that a stop of this process does not use up (kernels/stop_aware):
// real stops (SIGSTOP, then SIGCONT from the test) of child processes.
#include "kernels/stop_aware.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <sys/wait.h>
#include <spawn.h>
#include <unistd.h>

extern char** environ;

using namespace std::chrono;
using gradwire::kernels::last_stop_end;
using gradwire::kernels::last_stop_length;
using gradwire::kernels::ran;
using gradwire::kernels::waited;
using gradwire::kernels::watch_stops;

namespace {

long ms(steady_clock::duration d) { return static_cast<long>(duration_cast<milliseconds>(d).count()); }

/// Runs this test program again (a fresh process: no fork of a process
/// whose threads hold locks) on the hidden case `name`, which exits with
/// its result (0: it held); with `stop_for`, the test stops it (once it has
/// stopped itself, at a point of its own) that long before letting it go
/// on. Returns its exit status.
int in_child(const char* name, milliseconds stop_for = milliseconds(0)) {
  char exe[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", exe, sizeof exe - 1) > 0);
  const char* argv[] = {exe, name, nullptr};
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, exe, nullptr, nullptr, const_cast<char* const*>(argv), environ) == 0);
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

TEST_CASE("stopped child", "[.child]") { // (hidden: run by in_child)
  const auto t0 = steady_clock::now();
  watch_stops();
  std::this_thread::sleep_for(milliseconds(100));
  ::raise(SIGSTOP); // stopped here for 800 ms by the test
  // ran: the 100 ms before the stop and the moment after, less up to one
  // look (20 ms) before the stop, which the looks cannot tell from it
  const auto w = waited(t0), r = ran(t0);
  const auto elapsed = steady_clock::now() - t0;
  std::fprintf(stderr,
               "after the stop: waited %ld ms and ran %ld ms of %ld ms; the stop was seen as %ld ms, ending %ld ms "
               "ago\n",
               ms(w), ms(r), ms(elapsed), ms(last_stop_length()), ms(steady_clock::now() - last_stop_end()));
  std::_Exit(elapsed > milliseconds(800) && w < milliseconds(200) && r >= milliseconds(60) &&
                 r < milliseconds(700) && last_stop_length() > milliseconds(700) && last_stop_end() > t0
               ? 0
               : 1);
}

TEST_CASE("running child", "[.child]") {
  const auto t0 = steady_clock::now();
  watch_stops();
  std::this_thread::sleep_for(milliseconds(600)); // running (asleep), not stopped
  const auto w = waited(t0), r = ran(t0);
  std::fprintf(stderr, "a child that ran 600 ms: waited %ld ms, ran %ld ms\n", ms(w), ms(r));
  std::_Exit(w >= milliseconds(590) && r >= milliseconds(590) ? 0 : 1);
}

TEST_CASE("a stop of this process does not count in waited() or ran(): waits start afresh and the stop is no running time") {
  CHECK(in_child("stopped child", milliseconds(800)) == 0);
}

TEST_CASE("time this process ran counts in full: a thread asleep is no stop") {
  CHECK(in_child("running child") == 0);
}

TEST_CASE("a wait begun after the last stop counts from its own start") {
  const auto t0 = steady_clock::now();
  std::this_thread::sleep_for(milliseconds(50));
  const auto w = waited(t0);
  CHECK(w >= milliseconds(50));
  CHECK(w <= steady_clock::now() - t0);
  CHECK(waited(steady_clock::now() + seconds(1)) < steady_clock::duration::zero()); // (a start ahead: negative)
}
