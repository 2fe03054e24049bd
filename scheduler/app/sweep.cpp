#include "scheduler/app/sweep.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/runtime/launch.hpp"
#include "scheduler/app/topology_run.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace gradwire::scheduler {

sweep_axis parse_sweep(const std::string& text) {
  const auto eq = text.find('=');
  check(eq != std::string::npos && eq > 0 && eq + 1 < text.size(),
        "--sweep '" + text + "': expected KEY=V1,V2,... (e.g. topology.workers=1,2,4,8)");
  sweep_axis a;
  a.key = text.substr(0, eq);
  std::string cur;
  int depth = 0;
  for (char c : text.substr(eq + 1)) {
    if (c == '[')
      ++depth;
    if (c == ']')
      --depth;
    if (c == ',' && depth == 0) {
      a.values.push_back(cur);
      cur.clear();
    } else
      cur += c;
  }
  a.values.push_back(cur);
  for (const auto& v : a.values)
    check(!v.empty(), "--sweep '" + text + "': an empty value");
  return a;
}

namespace {

/// A value as a table shows it: TOML strings without their quotes.
std::string shown(const std::string& v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
    return v.substr(1, v.size() - 2);
  return v;
}

double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
}

struct stat {
  double mean = std::nan(""), sd = std::nan("");
};

stat of(const std::vector<double>& xs) {
  stat s;
  std::vector<double> v;
  for (double x : xs)
    if (!std::isnan(x))
      v.push_back(x);
  if (v.empty())
    return s;
  double sum = 0;
  for (double x : v)
    sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v)
      ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

std::string cell(stat s, const char* f, double scale = 1) {
  if (std::isnan(s.mean))
    return "n/a";
  auto out = fmt::format(fmt::runtime(f), s.mean * scale);
  if (!std::isnan(s.sd))
    out += " ± " + fmt::format(fmt::runtime(f), s.sd * scale);
  return out;
}

} // namespace

std::string run_sweep(const std::string& config_path, const std::vector<std::string>& overrides,
                      const std::vector<sweep_axis>& axes, std::string out_dir, const run_options& opts, int procs) {
  check(!axes.empty(), "a sweep needs at least one --sweep KEY=V1,V2,...");
  auto base = load_config(config_path, overrides); // errors in the config itself surface before any run
  if (out_dir.empty())
    out_dir = (base.out.empty() ? "results/" + base.name : base.out) + "-sweep";
  std::size_t points = 1;
  for (const auto& a : axes)
    points *= a.values.size();
  struct point {
    std::vector<std::string> values;
    nlohmann::json summary;
  };
  std::vector<point> done;
  const auto t0 = std::chrono::steady_clock::now();
  for (int pass = 0; pass < 2; ++pass) // pass 0 checks every point's config before anything runs
  for (std::size_t i = 0; i < points; ++i) {
    point p;
    std::vector<std::string> ov = overrides;
    std::string label;
    for (std::size_t k = 0, rest = i; k < axes.size(); ++k) {
      std::size_t stride = 1;
      for (std::size_t m = k + 1; m < axes.size(); ++m)
        stride *= axes[m].values.size();
      const auto vi = (rest / stride) % axes[k].values.size();
      const auto& v = axes[k].values[vi];
      p.values.push_back(v);
      if (axes[k].sets.empty())
        ov.push_back(axes[k].key + "=" + v);
      else
        ov.insert(ov.end(), axes[k].sets[vi].begin(), axes[k].sets[vi].end());
      label += (label.empty() ? "" : ",") + axes[k].key + "=" + v;
    }
    auto cfg = load_config(config_path, ov);
    if (pass == 0)
      continue;
    const auto point_dir = fmt::format("point-{:03d}", i);
    cfg.out = out_dir + "/" + point_dir;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "gradwire sweep: point %zu of %zu: %s%s\n", i + 1, points, label.c_str(),
                 i ? fmt::format(" (ETA {:.0f} s)", elapsed / static_cast<double>(i) * static_cast<double>(points - i)).c_str() : "");
    const int n = procs == -1 ? cfg.workers : procs;
    if (n > 1 && cfg.topology != "single") { // a job of n processes, as `gradwire run --procs n` starts it
      std::vector<std::string> args = {"run", config_path, "-q", "--no-report", "--out", cfg.out};
      for (const auto& o : ov) {
        args.push_back("--set");
        args.push_back(o);
      }
      const int rc = launch_local(n, args);
      check(rc == 0, fmt::format("sweep point {} of {} ({}): the job of {} processes exited with status {}", i + 1,
                                 points, label, n, rc));
      std::ifstream in(cfg.out + "/summary.json");
      p.summary = nlohmann::json::parse(in, nullptr, false);
      check(p.summary.is_object(), "sweep point " + label + ": no summary.json in " + cfg.out);
    } else {
      run_options po = opts;
      p.summary = cfg.topology != "single" ? run_actors(cfg, po) : run_single(cfg, po);
    }
    p.summary["sweep_point"] = label;
    p.summary["point_dir"] = point_dir;
    done.push_back(std::move(p));
    if (opts.stop && opts.stop->load())
      break;
  }
  check(!done.empty(), "the sweep was stopped before its first point finished");
  // Group repeats (points equal but for experiment.seed), in first-seen order.
  std::vector<std::string> keys;
  std::vector<std::size_t> axes_shown; // axes other than the seed
  for (std::size_t k = 0; k < axes.size(); ++k)
    if (axes[k].key != "experiment.seed") {
      axes_shown.push_back(k);
      keys.push_back(axes[k].key);
    }
  std::vector<std::pair<std::string, std::vector<const point*>>> groups;
  std::map<std::string, std::size_t> index;
  for (const auto& p : done) {
    std::string g;
    for (auto k : axes_shown)
      g += p.values[k] + "\x1f";
    auto [it, fresh] = index.emplace(g, groups.size());
    if (fresh)
      groups.push_back({g, {}});
    groups[it->second].second.push_back(&p);
  }
  auto metric = [](const std::vector<const point*>& ps, const char* key) {
    std::vector<double> xs;
    for (const auto* p : ps)
      xs.push_back(num(p->summary, key));
    return of(xs);
  };
  // The slowest workers' staleness tail (heterogeneous runs): p99 over the
  // workers with the largest slowdown, when some are slower than others.
  auto slow_p99 = [](const std::vector<const point*>& ps) {
    std::vector<double> xs;
    for (const auto* p : ps) {
      const auto& pw = p->summary.value("per_worker", nlohmann::json::array());
      double top = 1, p99 = std::nan("");
      for (const auto& w : pw)
        top = std::max(top, w.value("slowdown", 1.0));
      for (const auto& w : pw)
        if (top > 1 && w.value("slowdown", 1.0) == top && w.contains("staleness"))
          p99 = std::isnan(p99) ? num(w["staleness"], "p99") : std::max(p99, num(w["staleness"], "p99"));
      xs.push_back(p99);
    }
    return of(xs);
  };
  // summary[object][key] over the points (n/a where the object is absent or
  // null: staleness of a single run, step_time off lockstep topologies).
  auto nested = [](const std::vector<const point*>& ps, const char* object, const char* key) {
    std::vector<double> xs;
    for (const auto* p : ps) {
      const auto it = p->summary.find(object);
      xs.push_back(it != p->summary.end() && it->is_object() ? num(*it, key) : std::nan(""));
    }
    return of(xs);
  };
  // Speedup and efficiency against the group with the fewest workers.
  double base_thr = std::nan("");
  int base_workers = 1 << 30;
  bool same_workers = true;
  for (const auto& [g, ps] : groups)
    same_workers = same_workers && ps.front()->summary.value("workers", 1) == groups.front().second.front()->summary.value("workers", 1);
  for (const auto& [g, ps] : groups) {
    const int w = ps.front()->summary.value("workers", 1);
    if (w < base_workers) {
      base_workers = w;
      base_thr = metric(ps, "samples_per_sec").mean;
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  std::string md = "| ", csv;
  for (const auto& k : keys) {
    md += k + " | ";
    csv += k + ",";
  }
  md += "runs | samples/s | speedup | efficiency | test accuracy | time to target (s) | final loss | staleness mean | "
        "staleness p99 | slowest workers' p99 | waiting for slower | exchange |\n|";
  csv += "runs,samples_per_sec,samples_per_sec_sd,speedup,efficiency,final_test_accuracy,final_test_accuracy_sd,"
         "time_to_target,final_loss,staleness_mean,staleness_p99,slowest_workers_staleness_p99,imbalance,exchange\n";
  for (std::size_t k = 0; k < keys.size() + 12; ++k)
    md += "---|";
  md += "\n";
  for (const auto& [g, ps] : groups) {
    const auto thr = metric(ps, "samples_per_sec"), acc = metric(ps, "final_test_accuracy"),
               loss = metric(ps, "final_loss"), sm = nested(ps, "staleness", "mean"), sp = nested(ps, "staleness", "p99"), slow = slow_p99(ps),
               ttt = metric(ps, "time_to_target"), // n/a where a run never reached it
               imb = nested(ps, "step_time", "imbalance"), exch = nested(ps, "step_time", "exchange");
    const int w = ps.front()->summary.value("workers", 1);
    const double speedup = thr.mean / base_thr;
    // Efficiency only where the worker count varies; otherwise speedup is
    // the throughput relative to the first row.
    const double eff = same_workers ? std::nan("") : speedup * base_workers / w;
    nlohmann::json row;
    md += "| ";
    for (std::size_t k = 0; k < axes_shown.size(); ++k) {
      const auto v = shown(ps.front()->values[axes_shown[k]]);
      row[keys[k]] = v;
      md += v + " | ";
      csv += v + ",";
    }
    row.update({{"runs", ps.size()}, {"samples_per_sec", thr.mean}, {"speedup", speedup}, {"efficiency", std::isnan(eff) ? nlohmann::json(nullptr) : nlohmann::json(eff)},
                {"final_test_accuracy", acc.mean},
                {"time_to_target", std::isnan(ttt.mean) ? nlohmann::json(nullptr) : nlohmann::json(ttt.mean)},
                {"final_loss", loss.mean}, {"staleness_mean", sm.mean},
                {"staleness_p99", sp.mean},
                {"slowest_workers_staleness_p99", std::isnan(slow.mean) ? nlohmann::json(nullptr) : nlohmann::json(slow.mean)},
                {"imbalance", std::isnan(imb.mean) ? nlohmann::json(nullptr) : nlohmann::json(imb.mean)},
                {"exchange", std::isnan(exch.mean) ? nlohmann::json(nullptr) : nlohmann::json(exch.mean)}});
    rows.push_back(row);
    std::size_t reached = 0;
    for (const auto* p : ps)
      reached += p->summary.contains("time_to_target") && p->summary["time_to_target"].is_number();
    auto ttt_cell = cell(ttt, "{:.2f}");
    if (reached > 0 && reached < ps.size())
      ttt_cell += fmt::format(" ({} of {})", reached, ps.size());
    md += fmt::format("{} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", ps.size(), cell(thr, "{:.0f}"), speedup,
                      std::isnan(eff) ? std::string("n/a") : fmt::format("{:.0f}%", 100 * eff), cell(acc, "{:.2f}%", 100), ttt_cell, cell(loss, "{:.4f}"), cell(sm, "{:.2f}"),
                      cell(sp, "{:.1f}"), cell(slow, "{:.1f}"), cell(imb, "{:.1f}%", 100), cell(exch, "{:.1f}%", 100));
    csv += fmt::format("{},{:.1f},{:.1f},{:.4f},{:.4f},{:.4f},{:.4f},{:.3f},{:.5f},{:.3f},{:.1f},{:.1f},{:.4f},{:.4f}\n", ps.size(), thr.mean,
                       std::isnan(thr.sd) ? 0.0 : thr.sd, speedup, eff, acc.mean, std::isnan(acc.sd) ? 0.0 : acc.sd,
                       ttt.mean, loss.mean, sm.mean, sp.mean, slow.mean, imb.mean, exch.mean);
  }
  std::filesystem::create_directories(out_dir);
  std::ofstream(out_dir + "/sweep.md") << md;
  std::ofstream(out_dir + "/sweep.csv") << csv;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& p : done)
    all.push_back(p.summary);
  std::ofstream(out_dir + "/sweep.json") << nlohmann::json{{"points", all}, {"rows", rows}}.dump(2) << "\n";
  std::printf("\n%s\nsweep of %zu point(s): %s/sweep.md, sweep.csv, sweep.json; each point in %s/point-NNN/\n",
              md.c_str(), done.size(), out_dir.c_str(), out_dir.c_str());
  return out_dir;
}

} // namespace gradwire::scheduler
