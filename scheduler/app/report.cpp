#include "scheduler/app/report.hpp"
#include "scheduler/app/sweep_paired.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/plot.hpp"
#include "scheduler/app/report_html.hpp"
#include "scheduler/app/report_plots.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace gradwire::scheduler {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

/// The summary table's rows: the run's facts, its staleness, and in
/// virtual time what was modelled and what simulating it cost.
std::vector<std::vector<std::string>> summary_rows(const json& s) {
  std::vector<std::vector<std::string>> rows;
  for (const char* k : {"topology", "mode", "workers", "processes", "shards", "model", "parameters", "dataset", "batch_size",
                        "threads_per_worker", "optimizer", "lr", "steps", "steps_per_worker", "budget", "budget_samples",
                        "samples", "wall_seconds",
                        "train_seconds", "samples_per_sec", "final_loss", "final_test_accuracy", "final_test_loss",
                        "target_accuracy", "time_to_target", "replica_spread", "max_clock_gap", "dropped_pushes", "lost_workers",
                        "resumed_from"})
    if (s.contains(k))
      rows.push_back({k, shown(s[k])});
  if (s.contains("staleness"))
    for (const char* k : {"mean", "p50", "p99", "max", "count"})
      rows.push_back({std::string("staleness ") + k, shown(s["staleness"].value(k, json()))});
  if (s.contains("staleness_while_all_ran") && s["staleness_while_all_ran"].is_object())
    for (const char* k : {"mean", "p99", "seconds"})
      rows.push_back({std::string("staleness while all workers ran: ") + k,
                      shown(s["staleness_while_all_ran"].value(k, json()))});
  if (s.contains("clock") && s["clock"].is_object() && s["clock"].value("mode", "") == "virtual") {
    // Virtual time: what was modelled, and what simulating it cost (virtual_run.hpp).
    const auto& c = s["clock"];
    rows.push_back({"clock", "virtual: train_seconds and every time below are virtual seconds"});
    for (const auto& m : c.value("compute", json::array()))
      rows.push_back({"compute model, workers " + shown(m.value("ranks", json())),
                      shown(m.value("model", json())) + " (" + shown(m.value("from", json())) + ", slowdown " +
                        shown(m.value("slowdown", json())) + ")"});
    for (const char* k : {"link", "hosts", "workers_per_host", "host_workers", "threads", "wall_seconds", "events",
                          "events_per_s", "gradient_wall_seconds", "wait_wall_seconds", "scheduler_wall_seconds"})
      if (c.contains(k))
        rows.push_back({std::string("simulation: ") + k, shown(c[k])});
  }
  return rows;
}

/// Every failure the run met, and how it went on ("" when none).
std::string faults_section(const json& s) {
  std::string h;
  const auto& faults = s.value("faults", json::array());
  if (!faults.empty()) { // every failure the run met, and how it went on
    std::vector<std::vector<std::string>> fr;
    for (const auto& f : faults)
      fr.push_back({shown(f.value("rank", json())), shown(f.value("kind", json())), shown(f.value("detected_at", json())),
                    shown(f.value("recovered_at", json())), shown(f.value("at_step", json())),
                    shown(f.value("steps_lost", json())), shown(f.value("workers_after", json())),
                    shown(f.value("rejoined_step", json())), f.value("what", std::string())});
    h += "<h2>Faults</h2>\n" + table({"rank", "kind", "detected at (s)", "recovered at (s)", "went on from step", "steps lost",
                                      "workers after", "back at step", "what"}, fr);
  }
  return h;
}

/// Each worker's figures ("" when none).
std::string workers_section(const json& s) {
  std::string h;
  const auto& pw = s.value("per_worker", json::array());
  if (!pw.empty()) {
    std::vector<std::vector<std::string>> wr;
    for (const auto& w : pw)
      wr.push_back({shown(w.value("worker", json())), shown(w.value("batch_size", json())), shown(w.value("slowdown", json())),
                    shown(w.value("steps", json())), shown(w.value("samples_per_sec", json())),
                    shown(w.value("compute_seconds", json())), shown(w.value("comm_seconds", json())),
                    shown(w.value("wait_seconds", json())), shown(w.value("dropped_pushes", json())),
                    w.contains("staleness") ? shown(w["staleness"].value("mean", json())) : "n/a",
                    w.contains("staleness") ? shown(w["staleness"].value("p99", json())) : "n/a",
                    w.contains("staleness_while_all_ran") ? shown(w["staleness_while_all_ran"].value("mean", json())) : "n/a"});
    h += "<h2>Workers</h2>\n" + table({"worker", "batch", "slowdown", "steps", "samples/s", "compute s", "comm s", "wait s",
                                       "dropped", "staleness mean", "staleness p99", "staleness mean while all ran"}, wr);
  }
  return h;
}

/// Lines of metrics.jsonl the curves lack: said on the page and in the log.
std::string skipped_note(const std::string& dir, const std::vector<std::string>& skipped) {
  std::string h;
  if (!skipped.empty()) {
    std::string lines;
    for (std::size_t i = 0; i < skipped.size() && i < 5; ++i)
      lines += (i ? "; " : "") + skipped[i];
    if (skipped.size() > 5)
      lines += "; and " + std::to_string(skipped.size() - 5) + " more";
    const auto what = dir + "/metrics.jsonl: " + std::to_string(skipped.size()) + " line(s) skipped (" + lines + ")";
    log::warn("report: {}", what);
    h += "<p class=\"meta\">" + esc(what) + "</p>\n";
  }
  return h;
}

std::string run_body(const std::string& dir, const json& s, report_outcome& out) {
  std::vector<std::string> skipped;
  const auto records = read_records(dir + "/metrics.jsonl", &skipped);
  std::string h = "<p class=\"meta\">" + esc(s.value("description", s.value("topology", std::string("single")))) + " — " +
                  esc(s.value("status", std::string("?"))) + "</p>\n";
  h += skipped_note(dir, skipped);
  h += "<h2>Summary</h2>\n";
  h += table({"key", "value"}, summary_rows(s));
  auto specs = run_plots(s, records);
  auto po = draw_plots(dir + "/plots", specs);
  out.plots = po.files.size();
  out.problem = po.problem;
  h += "<h2>Plots</h2>\n" + figures(po, specs);
  h += faults_section(s);
  h += workers_section(s);
  h += "<p class=\"meta\">Files: <a href=\"summary.json\">summary.json</a>, <a href=\"metrics.jsonl\">metrics.jsonl</a>, "
       "<a href=\"config.toml\">config.toml</a>" +
       std::string(fs::exists(dir + "/trace.json") ? ", <a href=\"trace.json\">trace.json</a> (open in ui.perfetto.dev)" : "") +
       "</p>\n";
  return h;
}

/// The sweep's comparison: its rows, the swept keys first, then the
/// figures in a fixed order ("" without rows).
std::string comparison_table(const json& sw) {
  std::string h;
  const auto& rows = sw.value("rows", json::array());
  if (!rows.empty()) {
    std::vector<std::string> head;
    for (const auto& [k, v] : rows.front().items())
      head.push_back(k);
    // The swept keys first, then the figures in a fixed order.
    const std::vector<std::string> order = {"runs", "samples_per_sec", "tokens_per_sec", "speedup", "efficiency",
                                            "final_test_accuracy", "final_test_loss", "mb_sent_per_worker",
                                            "compress_error", "time_to_target",
                                            "final_loss", "staleness_mean", "staleness_p99",
                                            "slowest_workers_staleness_p99"};
    std::vector<std::string> cols;
    for (const auto& k : head)
      if (std::find(order.begin(), order.end(), k) == order.end())
        cols.push_back(k);
    for (const auto& k : order) // a figure some rows lack (compress_error: dense ones) is n/a there
      if (std::any_of(rows.begin(), rows.end(), [&k](const json& r) { return r.contains(k); }))
        cols.push_back(k);
    std::vector<std::vector<std::string>> body;
    for (const auto& r : rows) {
      std::vector<std::string> line;
      for (const auto& k : cols) {
        const auto& v = r.value(k, json());
        if (k == "efficiency" && v.is_number())
          line.push_back(fmt::format("{:.0f}%", 100 * v.get<double>()));
        else if (k == "final_test_accuracy" && v.is_number())
          line.push_back(fmt::format("{:.2f}%", 100 * v.get<double>()));
        else
          line.push_back(shown(v));
      }
      body.push_back(std::move(line));
    }
    h += "<h2>Comparison</h2>\n" + table(cols, body) +
         "<p class=\"meta\">Means over repeated seeds; the spreads are in <a href=\"sweep.md\">sweep.md</a> "
         "(also <a href=\"sweep.csv\">sweep.csv</a>, <a href=\"sweep.json\">sweep.json</a>).</p>\n";
  }
  return h;
}

/// A point's own page, written and linked; `fallback` where it cannot be
/// (no summary, or a damaged point: the sweep's page is kept).
std::string point_link(const std::string& dir, const std::string& pd, const std::string& fallback) {
  if (!fs::exists(dir + "/" + pd + "/summary.json"))
    return fallback;
  try {
    write_report(dir + "/" + pd);
    return "<a href=\"" + esc(pd) + "/report.html\">" + esc(pd) + "</a>";
  } catch (const std::exception&) {
    return fallback;
  }
}

std::string sweep_body(const std::string& dir, const json& sw, report_outcome& out) {
  std::string h = comparison_table(sw);
  if (const auto& pr = sw.value("paired", json::array()); !pr.empty())
    h += "<h2>Paired: each variant against the first, on the same schedule</h2>\n" +
         table(paired_columns(), paired_cells(pr)) + "<p class=\"meta\">" + esc(paired_note) + "</p>\n";
  auto specs = sweep_plots(dir, sw);
  auto po = draw_plots(dir + "/plots", specs);
  out.plots = po.files.size();
  out.problem = po.problem;
  h += "<h2>Plots</h2>\n" + figures(po, specs);
  // Every point gets its own page (per-worker curves, staleness per worker), linked here.
  h += "<h2>Points</h2>\n<table><thead><tr><th>report</th><th>settings</th><th>samples/s</th><th>test accuracy</th>"
       "<th>time to target (s)</th></tr></thead><tbody>\n";
  for (const auto& s : sw.value("points", json::array())) {
    const auto pd = s.value("point_dir", std::string());
    std::string link = esc(pd.empty() ? "?" : pd);
    if (!pd.empty())
      link = point_link(dir, pd, link);
    // A paired sweep's replay of this point on another's schedule is a run of its own.
    if (!pd.empty() && fs::exists(dir + "/" + pd + "-paired"))
      link += " " + point_link(dir, pd + "-paired", esc(pd + "-paired"));
    h += "<tr><td>" + link + "</td><td>" + esc(s.value("sweep_point", std::string())) + "</td><td>" +
         esc(shown(s.value("samples_per_sec", json()))) + "</td><td>" + esc(shown(s.value("final_test_accuracy", json()))) +
         "</td><td>" + esc(shown(s.value("time_to_target", json()))) + "</td></tr>\n";
  }
  return h + "</tbody></table>\n";
}

} // namespace

report_outcome write_report(const std::string& dir) {
  report_outcome out;
  std::string html;
  // A results file edited by hand, or another program's, may hold a key of
  // another type than gradwire writes: json's type error then becomes an
  // error naming the file (the report reads several; the top one is named).
  const bool sweep = fs::exists(dir + "/sweep.json");
  const std::string top = dir + (sweep ? "/sweep.json" : "/summary.json");
  if (sweep || fs::exists(top)) {
    try {
      if (sweep) {
        const auto sw = read_json(top);
        const auto& pts = sw.value("points", json::array());
        const std::string name = pts.empty() ? std::string("sweep") : pts.front().value("name", std::string("sweep"));
        html = page("gradwire sweep: " + name, sweep_body(dir, sw, out));
      } else {
        const auto s = read_json(top);
        html = page("gradwire run: " + s.value("name", std::string("run")), run_body(dir, s, out));
      }
    } catch (const json::exception& e) {
      throw error(top + " (or a file it names): a key of an unexpected type: " + e.what());
    }
  } else if (fs::exists(dir + "/metrics.jsonl")) {
    // A run killed before it wrote its summary (SIGKILL, out of memory, a
    // lost node), or one still running: its curves are in metrics.jsonl.
    const json s = {{"description", "its config: config.toml"},
                    {"status", "unfinished: no summary.json (the run was killed, or is still running); "
                               "the curves are metrics.jsonl's records so far"}};
    log::info("report: {} has no summary.json: the curves only", dir);
    html = page("gradwire run (unfinished): " + fs::path(dir).filename().string(), run_body(dir, s, out));
  } else {
    throw error(dir + ": neither summary.json (a run) nor sweep.json (a sweep) is here; give a results folder");
  }
  out.html = dir + "/report.html";
  std::ofstream(out.html + ".tmp") << html;
  fs::rename(out.html + ".tmp", out.html);
  return out;
}

} // namespace gradwire::scheduler
