#include "kernels/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <memory>

namespace gradwire::log {

namespace {

level initial_level() {
  if (const char* v = std::getenv("GRADWIRE_LOG_LEVEL"))
    if (auto l = parse_level(v))
      return *l;
  return level::info;
}

std::atomic<int>& current() {
  static std::atomic<int> l{static_cast<int>(initial_level())};
  return l;
}

/// One logger for the process: spdlog's locked sink keeps lines from
/// several threads whole; every line is flushed, as stderr is unbuffered.
spdlog::logger& sink() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("gradwire", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

std::string_view tag(level l) {
  switch (l) {
  case level::debug: return "gradwire: debug: ";
  case level::warn: return "gradwire: warning: ";
  case level::error: return "gradwire: error: ";
  default: return "gradwire: ";
  }
}

} // namespace

void set_level(level l) { current().store(static_cast<int>(l), std::memory_order_relaxed); }

level get_level() { return static_cast<level>(current().load(std::memory_order_relaxed)); }

std::optional<level> parse_level(std::string_view text) {
  if (text == "debug")
    return level::debug;
  if (text == "info")
    return level::info;
  if (text == "warn")
    return level::warn;
  if (text == "error")
    return level::error;
  if (text == "off")
    return level::off;
  return std::nullopt;
}

void write(level l, std::string_view text) {
  std::string line(tag(l));
  line += text;
  sink().log(spdlog::level::info, line);
}

} // namespace gradwire::log
