#include "scheduler/app/trace_file.hpp"
#include "kernels/log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace gradwire::scheduler {
namespace {

/// What a span's argument means, by track and span name.
const char* arg_name(const std::string& track, const char* span) {
  if (track.rfind("shard", 0) == 0)
    return std::string(span) == "push" ? "rank" : "version";
  if (track.rfind("ring", 0) == 0)
    return "round";
  return "step";
}

std::string part_path(const std::string& dir, int rank) {
  return dir + "/trace-rank" + std::to_string(rank) + ".part.json";
}

} // namespace

nlohmann::json trace_part(const actors::tracer& t, int pid) {
  nlohmann::json events = nlohmann::json::array();
  std::uint64_t dropped = 0;
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", "rank " + std::to_string(pid)}}}});
  int tid = 0;
  for (const auto* track : t.tracks()) {
    ++tid;
    std::uint64_t d = 0;
    auto spans = track->spans(&d);
    dropped += d;
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", track->name()}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    for (const auto& s : spans) {
      nlohmann::json e = {{"name", s.name}, {"cat", "gradwire"}, {"ph", "X"}, {"pid", pid}, {"tid", tid},
                          {"ts", static_cast<double>(s.begin_ns) * 1e-3},
                          {"dur", static_cast<double>(std::max<std::int64_t>(0, s.end_ns - s.begin_ns)) * 1e-3}};
      if (s.arg >= 0)
        e["args"] = {{arg_name(track->name(), s.name), s.arg}};
      events.push_back(std::move(e));
    }
  }
  return {{"events", std::move(events)}, {"dropped", dropped}};
}

void write_trace_part(const std::string& dir, int rank, const nlohmann::json& part) {
  try {
    std::filesystem::create_directories(dir);
    const auto path = part_path(dir, rank);
    {
      std::ofstream out(path + ".tmp");
      out << part.dump();
      out.flush();
      if (!out) {
        std::error_code ignored;
        std::filesystem::remove(path + ".tmp", ignored);
        throw std::runtime_error(std::string("cannot write ") + path + ".tmp: " + std::strerror(errno));
      }
    }
    std::filesystem::rename(path + ".tmp", path);
  } catch (const std::exception& e) {
    log::warn("rank {}: trace part not written to {}: {}", rank, dir, e.what());
  }
}

void write_trace(const std::string& dir, nlohmann::json part, int size, const std::string& run_name) {
  try {
    auto events = std::move(part["events"]);
    std::uint64_t dropped = part.value("dropped", std::uint64_t{0});
    nlohmann::json missing = nlohmann::json::array();
    for (int r = 1; r < size; ++r) {
      const auto path = part_path(dir, r);
      std::ifstream in(path);
      nlohmann::json p = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
      if (!p.is_object() || !p.contains("events") || !p["events"].is_array()) {
        missing.push_back(r);
        continue;
      }
      dropped += p.value("dropped", std::uint64_t{0});
      for (auto& e : p["events"])
        events.push_back(std::move(e));
      std::filesystem::remove(path);
    }
    double t0 = std::numeric_limits<double>::infinity();
    for (const auto& e : events)
      if (e.contains("ts"))
        t0 = std::min(t0, e["ts"].get<double>());
    for (auto& e : events)
      if (e.contains("ts"))
        e["ts"] = std::round((e["ts"].get<double>() - t0) * 1000.0) / 1000.0;
    nlohmann::json doc = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData", {{"run", run_name}, {"processes", size}, {"dropped_spans", dropped},
                                         {"missing_ranks", missing}}}};
    std::filesystem::create_directories(dir);
    const auto path = dir + "/trace.json";
    {
      std::ofstream out(path + ".tmp");
      out << doc.dump() << '\n';
      out.flush();
      if (!out) {
        const std::string why = std::strerror(errno);
        std::error_code ignored;
        std::filesystem::remove(path + ".tmp", ignored); // nothing partial left behind
        throw std::runtime_error("cannot write " + path + ".tmp: " + why);
      }
    }
    std::filesystem::rename(path + ".tmp", path);
  } catch (const std::exception& e) {
    log::warn("trace.json not written to {}: {}", dir, e.what());
  }
}

} // namespace gradwire::scheduler
