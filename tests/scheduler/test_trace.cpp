// trace.json: bounded per actor, valid JSON however the run ends, merged
// across ranks, and spans that describe what the actors did.
#include "actors/trace.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/topology_run.hpp"
#include "scheduler/app/trace_file.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <unistd.h>

using namespace gradwire;
using namespace gradwire::scheduler;
namespace fs = std::filesystem;

namespace {

std::string trace_dir(const std::string& name) { return gwtest::fresh_dir(name, true); }

nlohmann::json load(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in); // throws on invalid JSON
}

actors::trace_track::time_point at_us(std::int64_t us) {
  return actors::trace_track::time_point(std::chrono::microseconds(us));
}

/// Per (pid, tid): the spans, sorted by start.
std::map<std::pair<int, int>, std::vector<nlohmann::json>> by_track(const nlohmann::json& doc) {
  std::map<std::pair<int, int>, std::vector<nlohmann::json>> out;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X")
      out[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(e);
  for (auto& [k, v] : out)
    std::stable_sort(v.begin(), v.end(), [](const nlohmann::json& a, const nlohmann::json& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
  return out;
}

std::map<std::pair<int, int>, std::string> track_names(const nlohmann::json& doc) {
  std::map<std::pair<int, int>, std::string> out;
  for (const auto& e : doc["traceEvents"])
    if (e["name"] == "thread_name")
      out[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
  return out;
}

} // namespace

TEST_CASE("a track keeps its last spans in order and counts the ones it dropped") {
  actors::tracer t(5);
  auto* tr = t.track("worker 0");
  for (int i = 0; i < 12; ++i)
    tr->span("compute", at_us(10 * i), at_us(10 * i + 5), i);
  std::uint64_t dropped = 0;
  auto spans = tr->spans(&dropped);
  REQUIRE(spans.size() == 5);
  CHECK(dropped == 7);
  for (std::size_t k = 0; k < spans.size(); ++k) {
    CHECK(spans[k].arg == static_cast<std::int64_t>(7 + k));
    CHECK(spans[k].end_ns - spans[k].begin_ns == 5000);
  }
  auto part = trace_part(t, 0);
  CHECK(part["dropped"] == 7);
  // Off: a null reference records nothing and costs nothing.
  actors::trace_ref off;
  off.since("compute", at_us(0));
  CHECK_FALSE(off);
}

TEST_CASE("trace.json merges the ranks' parts, starts at 0 and lists missing ranks") {
  const auto dir = trace_dir("merge");
  actors::tracer t0(100), t1(100);
  t0.track("worker 0")->span("compute", at_us(1000), at_us(1500), 0);
  auto* s = t0.track("shard 0");
  s->span("push", at_us(1600), at_us(1700), 1);
  s->span("apply", at_us(1620), at_us(1690), 3);
  t1.track("worker 1")->span("compute", at_us(1100), at_us(1400), 0);
  write_trace_part(dir, 1, trace_part(t1, 1));
  REQUIRE(fs::exists(dir + "/trace-rank1.part.json"));
  write_trace(dir, trace_part(t0, 0), 3, "merge"); // rank 2 never wrote its part
  auto doc = load(dir + "/trace.json");
  CHECK_FALSE(fs::exists(dir + "/trace-rank1.part.json")); // merged, then removed
  CHECK(doc["otherData"]["missing_ranks"] == nlohmann::json::array({2}));
  CHECK(doc["otherData"]["processes"] == 3);
  auto tracks = by_track(doc);
  auto names = track_names(doc);
  REQUIRE(tracks.size() == 3);
  CHECK(names[{1, 1}] == "worker 1");
  CHECK(tracks[{0, 1}][0]["ts"].get<double>() == Approx(0.0)); // the earliest span starts the time line
  CHECK(tracks[{1, 1}][0]["ts"].get<double>() == Approx(100.0));
  CHECK(tracks[{1, 1}][0]["dur"].get<double>() == Approx(300.0));
  const auto& shard = tracks[{0, 2}];
  REQUIRE(shard.size() == 2);
  CHECK(shard[0]["args"]["rank"] == 1);    // a push names the pushing rank
  CHECK(shard[1]["args"]["version"] == 3); // an apply the version it made
  fs::remove_all(dir);
}

TEST_CASE("trace.json is written, whole, when a run fails") {
  const auto dir = trace_dir("fails");
  auto t = std::make_shared<actors::tracer>(10);
  try {
    trace_output out(t, dir, "fails", 1);
    t->track("worker 0")->span("compute", at_us(0), at_us(10), 0);
    throw std::runtime_error("the run failed");
  } catch (const std::runtime_error&) {
  }
  auto doc = load(dir + "/trace.json");
  CHECK(by_track(doc).size() == 1);
  CHECK_FALSE(fs::exists(dir + "/trace.json.tmp"));
  fs::remove_all(dir);
}

TEST_CASE("a ring run's trace: every worker step computed, chunks reduced, spans nested per track") {
  const auto dir = trace_dir("ring");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_train = 1024\nsynthetic_test = 200\n"
                          "[topology]\nkind = \"ring\"\nworkers = 3\noverlap = true\nbucket_kb = 64\nchunk_kb = 16\n"
                          "[train]\nepochs = 1\nbatch_size = 32\n",
                          "t.toml", {"experiment.out=" + dir});
  run_options o;
  o.progress = false;
  auto s = run_actors(cfg, o);
  const auto steps = s["steps_per_worker"].get<std::int64_t>();
  auto doc = load(dir + "/trace.json");
  auto names = track_names(doc);
  std::map<std::string, std::map<std::string, int>> counts; // track -> span name -> count
  for (const auto& [key, spans] : by_track(doc)) {
    const auto& track = names[key];
    for (std::size_t i = 0; i < spans.size(); ++i) {
      ++counts[track][spans[i]["name"].get<std::string>()];
      CHECK(spans[i]["dur"].get<double>() >= 0);
      // Chrome's format wants spans on one track disjoint or nested.
      const double end = spans[i]["ts"].get<double>() + spans[i]["dur"].get<double>();
      for (std::size_t j = i + 1; j < spans.size() && spans[j]["ts"].get<double>() < end - 1e-3; ++j) {
        INFO(track << ": " << spans[i] << " and " << spans[j]);
        CHECK(spans[j]["ts"].get<double>() + spans[j]["dur"].get<double>() <= end + 1e-3);
      }
    }
  }
  for (int r = 0; r < 3; ++r) {
    const auto w = "worker " + std::to_string(r), p = "ring peer " + std::to_string(r);
    INFO(w);
    CHECK(counts[w]["compute"] == steps);
    CHECK(counts[w]["apply"] == steps);
    CHECK(counts[p]["reduce"] > 0);
    CHECK(counts[p]["gather"] > 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("experiment.trace = false writes no trace") {
  const auto dir = trace_dir("off");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_train = 512\nsynthetic_test = 100\n"
                          "[experiment]\ntrace = false\n[train]\nepochs = 1\n[topology]\nkind = \"parameter-server\"\n",
                          "t.toml", {"experiment.out=" + dir});
  run_options o;
  o.progress = false;
  run_actors(cfg, o);
  CHECK(fs::exists(dir + "/summary.json"));
  CHECK_FALSE(fs::exists(dir + "/trace.json"));
  fs::remove_all(dir);
}
