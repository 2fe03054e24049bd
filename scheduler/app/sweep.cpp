#include "scheduler/app/sweep.hpp"

#include "scheduler/app/run_summary.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/runtime/launch.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/replay.hpp"
#include "scheduler/app/sweep_paired.hpp"
#include "scheduler/app/sweep_table.hpp"
#include "scheduler/app/topology_run.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <optional>
#include <set>

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

/// Point `i` of the grid (the last axis fastest): its values, its
/// overrides on top of `overrides`, and its label "key=value,...".
struct point_plan {
  std::vector<std::string> values, overrides;
  std::string label;
};

point_plan plan_point(const std::vector<sweep_axis>& axes, const std::vector<std::string>& overrides, std::size_t i) {
  point_plan p;
  p.overrides = overrides;
  for (std::size_t k = 0, rest = i; k < axes.size(); ++k) {
    std::size_t stride = 1;
    for (std::size_t m = k + 1; m < axes.size(); ++m)
      stride *= axes[m].values.size();
    const auto vi = (rest / stride) % axes[k].values.size();
    const auto& v = axes[k].values[vi];
    p.values.push_back(v);
    if (axes[k].sets.empty())
      p.overrides.push_back(axes[k].key + "=" + v);
    else
      p.overrides.insert(p.overrides.end(), axes[k].sets[vi].begin(), axes[k].sets[vi].end());
    p.label += (p.label.empty() ? "" : ",") + axes[k].key + "=" + v;
  }
  return p;
}

/// Runs one point in this process, or as a job of `procs` local processes
/// (as `gradwire run --procs n` starts it); its summary.json.
nlohmann::json run_point(const std::string& config_path, const point_plan& pp, run_config cfg, int procs,
                         const run_options& opts, const std::string& where) {
  const int n = procs == -1 ? cfg.workers : procs;
  if (n <= 1 || cfg.single())
    return cfg.single() ? run_single(cfg, opts) : run_actors(cfg, opts);
  std::vector<std::string> args = {"run", config_path, "-q", "--no-report", "--out", cfg.out};
  for (const auto& o : pp.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  const int rc = launch_local(n, args, cfg.restarts);
  check(rc == 0, fmt::format("sweep point {} ({}): the job of {} processes exited with status {}", where, pp.label, n, rc));
  std::ifstream in(cfg.out + "/summary.json");
  auto summary = nlohmann::json::parse(in, nullptr, false);
  check(summary.is_object(), "sweep point " + pp.label + ": no summary.json in " + cfg.out);
  return summary;
}

void write_sweep(const std::string& out_dir, const std::vector<sweep_point>& done, sweep_table t,
                 const paired_table* paired) {
  std::filesystem::create_directories(out_dir);
  if (paired)
    t.md += paired->md;
  std::ofstream(out_dir + "/sweep.md") << t.md;
  std::ofstream(out_dir + "/sweep.csv") << t.csv;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& p : done)
    all.push_back(p.summary);
  nlohmann::json j{{"points", all}, {"rows", t.rows}};
  if (paired)
    j["paired"] = paired->rows;
  std::ofstream(out_dir + "/sweep.json") << j.dump(2) << "\n";
  std::printf("\n%s\nsweep of %zu point(s): %s/sweep.md, sweep.csv, sweep.json; each point in %s/point-NNN/\n",
              t.md.c_str(), done.size(), out_dir.c_str(), out_dir.c_str());
}

/// The index of the paired variants among `axes`, or axes.size().
std::size_t paired_axis(const std::vector<sweep_axis>& axes) {
  for (std::size_t k = 0; k < axes.size(); ++k)
    if (axes[k].paired)
      return k;
  return axes.size();
}

/// Paired: every variant after the first must keep the schedule.
void check_paired(const sweep_axis& variants) {
  for (std::size_t v = 1; v < variants.sets.size(); ++v) {
    try {
      check_replay_overrides(variants.sets[v]);
    } catch (const error& e) {
      throw error("[sweep] paired = true: [sweep.variants] \"" + variants.values[v] +
                  "\" is replayed on the first variant's schedule, so it may not change it: " + e.what());
    }
  }
}

/// Paired: the point of `done` with `p`'s values but the first variant.
std::size_t base_of(const std::vector<sweep_point>& done, const sweep_point& p, const sweep_axis& variants,
                    std::size_t axis) {
  for (std::size_t j = 0; j < done.size(); ++j) {
    auto want = p.values;
    want[axis] = variants.values.front();
    if (done[j].values == want)
      return j;
  }
  return done.size();
}

/// Paired: `variant`'s settings replayed on the run in `base_dir`, into `dir`.
nlohmann::json run_paired(const std::string& base_dir, const std::string& dir, const std::vector<std::string>& variant,
                          const run_options& opts) {
  const auto src = open_replay({base_dir, dir, variant});
  auto o = opts;
  o.replay = src.cut;
  o.replay_facts = src.facts;
  return run_actors(src.cfg, o);
}

/// Paired: point `i` of `done` (a variant after the first) replayed on its
/// first variant's point, if that ran.
std::optional<paired_point> pair_point(const std::vector<sweep_point>& done, std::size_t i, const sweep_axis& variants,
                                       std::size_t axis, const std::string& out_dir, const run_options& opts) {
  const auto& p = done[i];
  const auto v = static_cast<std::size_t>(
    std::find(variants.values.begin(), variants.values.end(), p.values[axis]) - variants.values.begin());
  const auto base = base_of(done, p, variants, axis);
  if (v == 0 || v >= variants.values.size() || base >= done.size() || done[base].summary.value("status", "") != "completed")
    return std::nullopt;
  const auto dir = p.summary.value("point_dir", std::string()) + "-paired";
  log::info("sweep: {} replayed on the schedule of {}", p.summary.value("sweep_point", std::string()),
            done[base].summary.value("sweep_point", std::string()));
  try {
    return paired_point{base, i, run_paired(out_dir + "/" + done[base].summary.value("point_dir", std::string()),
                                            out_dir + "/" + dir, variants.sets[v], opts)};
  } catch (const std::exception& e) {
    log::warn("sweep: the paired replay in {} failed: {}", dir, e.what());
    return paired_point{base, i, {{"status", failure_status(e.what())}, {"error", e.what()}}};
  }
}

/// The axes and overrides set each key once: a key varied twice, or also
/// --set, would be set twice per point, the later value winning.
void check_grid(const std::vector<sweep_axis>& axes, const std::vector<std::string>& overrides) {
  check(!axes.empty(), "a sweep needs at least one --sweep KEY=V1,V2,...");
  const auto key_of = [](const std::string& set) { return set.substr(0, set.find('=')); }; // "key=value"
  std::set<std::string> varied;
  for (const auto& a : axes)
    check(varied.insert(a.key).second,
          "the sweep varies " + a.key + " twice: give all its values in one --sweep " + a.key + "=V1,V2,...");
  for (const auto& o : overrides)
    check(varied.count(key_of(o)) == 0,
          "--set " + key_of(o) + " is also swept: the sweep's values would replace it (drop one)");
  for (const auto& a : axes)
    for (std::size_t v = 0; v < a.sets.size(); ++v)
      for (const auto& set : a.sets[v])
        check(varied.count(key_of(set)) == 0, "[sweep.variants] \"" + a.values[v] + "\" sets " + key_of(set) +
                                                ", which the sweep also varies (its values would replace the variant's)");
}

} // namespace

std::string run_sweep(const std::string& config_path, const std::vector<std::string>& overrides,
                      const std::vector<sweep_axis>& axes, std::string out_dir, const run_options& opts, int procs,
                      std::vector<std::string>* failed) {
  check_grid(axes, overrides);
  const auto paired = paired_axis(axes);
  if (paired < axes.size())
    check_paired(axes[paired]);
  auto base = load_config(config_path, overrides); // errors in the config itself surface before any run
  if (out_dir.empty())
    out_dir = (base.out.empty() ? "results/" + base.name : base.out) + "-sweep";
  std::size_t points = 1;
  for (const auto& a : axes)
    points *= a.values.size();
  for (std::size_t i = 0; i < points; ++i) // every point's config checked before anything runs
    load_config(config_path, plan_point(axes, overrides, i).overrides);
  claim_results_folder(out_dir, opts.force, "sweep");
  std::vector<sweep_point> done;
  std::vector<paired_point> pairs;
  std::vector<std::string> failures;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < points; ++i) {
    const auto pp = plan_point(axes, overrides, i);
    auto cfg = load_config(config_path, pp.overrides);
    const auto point_dir = fmt::format("point-{:03d}", i);
    cfg.out = out_dir + "/" + point_dir;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log::info("sweep: point {} of {}: {}{}",
      i + 1, points, pp.label, i ? fmt::format(" (ETA {:.0f} s)", elapsed / static_cast<double>(i) * static_cast<double>(points - i)).c_str() : "");
    const int workers = cfg.single() ? 1 : cfg.workers;
    sweep_point p{pp.values, {}};
    try {
      p.summary = run_point(config_path, pp, std::move(cfg), procs, opts, fmt::format("{} of {}", i + 1, points));
    } catch (const std::exception& e) { // the other points still run, and the table keeps what is done
      log::warn("sweep: point {} of {} ({}) failed: {}", i + 1, points, pp.label, e.what());
      p.summary = {{"status", failure_status(e.what())}, {"error", e.what()}, {"workers", workers}};
      failures.push_back(fmt::format("point {} ({}): {}", i + 1, pp.label, e.what()));
    }
    p.summary["sweep_point"] = pp.label;
    p.summary["point_dir"] = point_dir;
    done.push_back(std::move(p));
    if (paired < axes.size())
      if (auto pr = pair_point(done, done.size() - 1, axes[paired], paired, out_dir, opts))
        pairs.push_back(std::move(*pr));
    if (opts.stop && opts.stop->load())
      break;
  }
  check(!done.empty(), "the sweep was stopped before its first point finished");
  std::optional<paired_table> pt;
  if (paired < axes.size())
    pt = make_paired_table(done, pairs, axes, paired);
  write_sweep(out_dir, done, make_sweep_table(done, axes), pt ? &*pt : nullptr);
  if (failed != nullptr)
    *failed = failures;
  return out_dir;
}

} // namespace gradwire::scheduler
