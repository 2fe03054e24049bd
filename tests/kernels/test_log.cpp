// The project's log: levels filter, each level has its tag, lines from many
// threads arrive whole.
#include "kernels/log.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

using namespace gradwire;

namespace {

/// Standard error into a file while it lives; text() reads what was written.
class stderr_capture {
public:
  explicit stderr_capture(const std::string& name) : path_(gwtest::fresh_dir(name, true) + "/stderr.txt") {
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~stderr_capture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

private:
  void restore() {
    if (saved_ >= 0) {
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
  }
  std::string path_;
  int saved_ = -1;
};

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
  stderr_capture cap("log-levels");
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
    stderr_capture cap("log-off");
    log::error("not shown");
    CHECK(cap.text().empty());
  }
  log::set_level(log::level::debug);
  stderr_capture cap("log-debug");
  log::debug("a");
  log::info("b");
  CHECK(cap.text() == "gradwire: debug: a\ngradwire: b\n");
}

TEST_CASE("log: lines written by several threads at once arrive whole") {
  level_guard guard;
  log::set_level(log::level::info);
  stderr_capture cap("log-threads");
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
