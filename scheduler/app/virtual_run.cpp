#include "scheduler/app/virtual_run.hpp"

#include "kernels/error.hpp"
#include "models/batcher.hpp"
#include "models/model.hpp"
#include "models/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <thread>

namespace gradwire::scheduler {

namespace {

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
      return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

std::filesystem::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && *xdg)
    return std::filesystem::path(xdg) / "gradwire" / "step_times.tsv";
  if (home && *home)
    return std::filesystem::path(home) / ".cache" / "gradwire" / "step_times.tsv";
  return {};
}

std::string cache_key(const run_config& cfg, int batch) {
  std::ostringstream k;
  k << cfg.model.kind << "|";
  if (cfg.model.kind == "mlp")
    for (int h : cfg.model.hidden)
      k << h << ",";
  k << "|" << cfg.model.channels << "x" << cfg.model.height << "x" << cfg.model.width << "|" << cfg.model.classes
    << "|batch " << batch << "|1 thread|" << cpu_name();
  return k.str();
}

/// A real run's metrics.jsonl: each worker's step times in seconds, by rank
/// (a window's mean compute_ms for each of its steps).
std::vector<std::vector<double>> read_replay(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "virtual.replay = \"" + path + "\": cannot read it (give a real run's metrics.jsonl)");
  std::map<int, std::vector<double>> by_rank;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw error(path + ":" + std::to_string(n) + ": not a JSON record (" + e.what() + ")");
    }
    if (!j.is_object() || j.value("type", "") != "step")
      continue;
    const auto rank = j.value("worker", -1);
    const auto steps = j.value("steps", 0);
    const auto ms = j.value("compute_ms", -1.0);
    check(rank >= 0 && rank < (1 << 20) && steps > 0 && steps <= (1 << 30) && ms >= 0 && ms < 1e7,
          path + ":" + std::to_string(n) + ": a step record needs worker, steps and compute_ms in range");
    auto& v = by_rank[rank];
    v.insert(v.end(), static_cast<std::size_t>(steps), ms * 1e-3);
  }
  check(!by_rank.empty(), "virtual.replay = \"" + path + "\": no step records (type \"step\") in it");
  std::vector<std::vector<double>> out;
  for (auto& [r, v] : by_rank)
    out.push_back(std::move(v));
  return out;
}

} // namespace

double measured_step_seconds(const run_config& cfg, int batch, const models::dataset& train, bool* cached) {
  const auto key = cache_key(cfg, batch);
  const auto file = cache_file();
  if (!file.empty()) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      const auto tab = line.rfind('\t');
      if (tab != std::string::npos && line.compare(0, tab, key) == 0 && tab == key.size()) {
        const double s = std::strtod(line.c_str() + tab + 1, nullptr);
        if (s > 0 && s < 1e4) {
          if (cached)
            *cached = true;
          return s;
        }
      }
    }
  }
  models::model m(cfg.model, kernels::device::cpu(), cfg.seed);
  models::trainer t(m, cfg.opt, 1);
  models::batcher feed(train, models::shard_indices(train.size(), 0, 1, cfg.seed), batch, cfg.seed);
  models::batch bt;
  std::vector<double> times;
  for (int i = 0; i < 23; ++i) {
    if (!feed.next(bt) || bt.size != batch)
      check(feed.next(bt) && bt.size == batch, "virtual.step_ms = 0: the training set holds no batch of " +
                                                 std::to_string(batch) + " to measure a step on");
    const auto t0 = std::chrono::steady_clock::now();
    t.compute_gradients(bt.x.data(), bt.y.data(), bt.size);
    if (i >= 3)
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  // To 0.1 us, written with every digit: the run that measures and every
  // run that reads the cache get the same double. (With the stream's 6
  // digits they did not: a draw from the compute model then rounded to
  // another ns now and then, and the second run differed from the first.)
  const double s = std::max(1e-7, std::round(times[times.size() / 2] * 1e7) * 1e-7);
  if (!file.empty()) { // a cache that cannot be written only costs a measurement next time
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    std::ofstream(file, std::ios::app) << key << '\t' << std::setprecision(17) << s << '\n';
  }
  if (cached)
    *cached = false;
  return s;
}

namespace {

/// The [virtual] and [transport] keys the simulation's hosts and links take.
virtual_setup setup_of(const run_config& cfg) {
  const auto& v = cfg.virt;
  virtual_setup vs;
  vs.seed = cfg.seed;
  vs.workers_per_host = v.workers_per_host;
  vs.hosts = v.hosts;
  vs.host_of = v.host_of();
  vs.link.host_gbps = v.host_gbps;
  vs.link.latency_us = cfg.latency_us;
  vs.link.bandwidth_gbps = cfg.bandwidth_gbps;
  vs.link.intra_latency_us = v.intra_latency_us;
  vs.link.intra_bandwidth_gbps = v.intra_bandwidth_gbps;
  vs.link.nic = v.nic;
  vs.cores_per_host = v.cores_per_host;
  vs.threads = v.threads > 0 ? v.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  vs.link.latency_cv = v.latency_cv;
  vs.apply_gbps = v.apply_gbps;
  vs.copy_gbps = v.copy_gbps;
  vs.restart_s = v.restart_s;
  return vs;
}

/// Each worker's compute model, and where its step time comes from.
struct compute_models {
  const run_config& cfg;
  const models::dataset& train;
  std::vector<std::vector<double>> replay;
  std::map<int, std::pair<double, bool>> measured; ///< by batch: seconds, cached

  /// Worker r's model (in group `g`, or null for the defaults); `source`
  /// says where its step time comes from.
  compute_model of(int r, const node_group* g, std::string& source) {
    const auto& v = cfg.virt;
    compute_model c;
    c.dist = v.distribution == "lognormal"   ? compute_model::shape::lognormal
             : v.distribution == "straggler" ? compute_model::shape::straggler
                                             : compute_model::shape::constant;
    c.cv = v.cv;
    c.straggler_p = v.straggler_p;
    c.straggler_k = v.straggler_k;
    source = "virtual.step_ms";
    if (!replay.empty()) {
      c.replay = replay[static_cast<std::size_t>(r) % replay.size()];
      source = "replayed from " + v.replay;
    } else if (g && g->step_ms > 0) {
      c.step_s = g->step_ms * 1e-3;
      source = g->where + " step_ms";
    } else if (v.step_ms > 0) {
      c.step_s = v.step_ms * 1e-3;
    } else {
      const int batch = g && g->batch_size > 0 ? g->batch_size : cfg.batch_size;
      auto it = measured.find(batch);
      if (it == measured.end()) {
        bool cached = false;
        const double s = measured_step_seconds(cfg, batch, train, &cached);
        it = measured.emplace(batch, std::make_pair(s, cached)).first;
      }
      c.step_s = it->second.first;
      source = std::string(it->second.second ? "measured on this machine (cached)" : "measured on this machine") +
               " at batch " + std::to_string(batch);
    }
    return c;
  }
};

/// summary.json's compute models: runs of ranks that share one.
void add_model_fact(nlohmann::json& models, int r, const compute_model& c, const std::string& source, double slowdown) {
  nlohmann::json m = {{"model", c.describe()}, {"from", source}, {"slowdown", slowdown}};
  if (models.empty() || models.back()["model"] != m["model"] || models.back()["from"] != m["from"] ||
      models.back()["slowdown"] != m["slowdown"]) {
    m["ranks"] = nlohmann::json::array({r, r});
    models.push_back(m);
  } else {
    models.back()["ranks"][1] = r;
  }
}

} // namespace

std::shared_ptr<simulation> make_simulation(caf::actor_system& sys, const run_config& cfg,
                                            const models::dataset& train, nlohmann::json& facts) {
  const auto& v = cfg.virt;
  auto vs = setup_of(cfg);
  compute_models cm{cfg, train, {}, {}};
  if (!v.replay.empty())
    cm.replay = read_replay(v.replay);
  // Each worker's group ([[nodes]], in order) or the defaults.
  std::vector<const node_group*> group_of;
  for (const auto& g : cfg.nodes)
    group_of.insert(group_of.end(), static_cast<std::size_t>(g.count), &g);
  nlohmann::json models = nlohmann::json::array();
  for (int r = 0; r < cfg.workers; ++r) {
    const auto* g = static_cast<std::size_t>(r) < group_of.size() ? group_of[static_cast<std::size_t>(r)] : nullptr;
    std::string source;
    vs.compute.push_back(cm.of(r, g, source));
    add_model_fact(models, r, vs.compute.back(), source, g ? g->slowdown : 1.0);
  }
  facts = {{"mode", "virtual"},
           {"hosts", vs.hosts},
           {"workers_per_host", vs.workers_per_host},
           {"cores_per_host", vs.cores_per_host},
           {"apply_gbps", vs.apply_gbps},
           {"copy_gbps", vs.copy_gbps},
           {"compute", models},
           {"link", vs.link.describe()},
           {"note", "times are virtual seconds: gradients are computed for real, compute and link time come from "
                    "the models above"}};
  if (!v.host_workers.empty())
    facts["host_workers"] = v.host_workers;
  return simulation::make(sys, std::move(vs));
}

void add_simulation_cost(const simulation& sim, nlohmann::json& facts) {
  const auto& s = sim.stats();
  facts["virtual_seconds"] = s.virtual_seconds;
  facts["wall_seconds"] = s.wall_seconds;
  facts["threads"] = s.threads;
  // Where the time went: computing gradients (on any thread, and of it on
  // the loop's); the loop waiting for a helper's gradient; the actors'
  // other work (copies, shard updates, CAF's dispatch); the loop's own.
  facts["gradient_wall_seconds"] = s.compute_wall_seconds;
  facts["gradient_loop_wall_seconds"] = s.handler_compute_wall_seconds + s.loop_compute_wall_seconds;
  facts["wait_wall_seconds"] = s.wait_wall_seconds;
  facts["actor_wall_seconds"] = s.handler_wall_seconds - s.handler_compute_wall_seconds;
  const double own = s.wall_seconds - s.handler_wall_seconds - s.loop_compute_wall_seconds - s.wait_wall_seconds;
  facts["scheduler_wall_seconds"] = own;
  facts["scheduler_overhead_of_gradients"] = s.compute_wall_seconds > 0 ? own / s.compute_wall_seconds : 0;
  facts["events"] = s.events;
  facts["events_per_s"] = s.wall_seconds > 0 ? static_cast<double>(s.events) / s.wall_seconds : 0;
  facts["messages"] = s.messages;
  facts["message_bytes"] = s.bytes;
  facts["speedup_over_real_time"] = s.wall_seconds > 0 ? s.virtual_seconds / s.wall_seconds : 0;
}

} // namespace gradwire::scheduler
