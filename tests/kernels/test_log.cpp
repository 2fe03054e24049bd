// The project's log: levels filter, each level has its tag, lines from many
// threads arrive whole.
#include "kernels/log.hpp"
#include "stderr_capture.hpp"

#include <catch2/catch.hpp>

#include <sstream>
#include <thread>
#include <vector>

using namespace gradwire;

namespace {

/// Restores the level a test changed.
struct level_guard {
  log::level was = log::get_level();
  ~level_guard() { log::set_level(was); }
};

} // namespace

TEST_CASE("log: levels are parsed by name, and nothing else is a level") {
  CHECK(log::parse_level("debug") == log::level::debug);
  CHECK(log::parse_level("info") == log::level::info);
  CHECK(log::parse_level("warn") == log::level::warn);
  CHECK(log::parse_level("error") == log::level::error);
  CHECK(log::parse_level("off") == log::level::off);
  CHECK_FALSE(log::parse_level("warning").has_value());
  CHECK_FALSE(log::parse_level("").has_value());
}

TEST_CASE("log: lines below the level are dropped, the rest carry their level's tag") {
  level_guard guard;
  log::set_level(log::level::warn);
  gwtest::stderr_capture cap("log-levels");
  log::debug("d {}", 1);
  log::info("i {}", 2);
  log::warn("rank {}: w {}", 3, "x");
  log::error("e {:.1f}", 4.25);
  const auto text = cap.text();
  CHECK(text == "gradwire: warning: rank 3: w x\ngradwire: error: e 4.2\n");
}

TEST_CASE("log: off drops everything, debug keeps everything") {
  level_guard guard;
  {
    log::set_level(log::level::off);
    gwtest::stderr_capture cap("log-off");
    log::error("not shown");
    CHECK(cap.text().empty());
  }
  log::set_level(log::level::debug);
  gwtest::stderr_capture cap("log-debug");
  log::debug("a");
  log::info("b");
  CHECK(cap.text() == "gradwire: debug: a\ngradwire: b\n");
}

TEST_CASE("log: lines written by several threads at once arrive whole") {
  level_guard guard;
  log::set_level(log::level::info);
  gwtest::stderr_capture cap("log-threads");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i)
        log::info("thread {} line {} {}", t, i, std::string(100, 'x'));
    });
  for (auto& th : threads)
    th.join();
  std::istringstream in(cap.text());
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    REQUIRE(line.rfind("gradwire: thread ", 0) == 0);
    REQUIRE(line.size() > 100);
    REQUIRE(line.substr(line.size() - 100) == std::string(100, 'x'));
  }
  CHECK(lines == 800);
}
