#include "scheduler/app/compare.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/report_html.hpp"
#include "scheduler/app/report_plots.hpp"
#include "scheduler/app/results.hpp"

#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace gradwire::scheduler {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

void flatten(const toml::node& n, const std::string& key, std::vector<std::pair<std::string, std::string>>& out) {
  if (const auto* t = n.as_table()) {
    for (const auto& [k, v] : *t)
      flatten(v, key.empty() ? std::string(k.str()) : key + "." + std::string(k.str()), out);
  } else if (const auto* a = n.as_array(); a != nullptr && !a->empty() && a->front().is_table()) {
    for (std::size_t i = 0; i < a->size(); ++i) // [[faults]], [[nodes]]: one key per field of each entry
      flatten(*a->get(i), key + "[" + std::to_string(i) + "]", out);
  } else {
    std::ostringstream s;
    n.visit([&s](const auto& v) { s << toml::toml_formatter{v}; }); // (a leaf: a value or a plain array)
    out.emplace_back(key, s.str());
  }
}

/// Each run's label: its folder's name, with the parent's where two agree.
std::vector<std::string> labels_of(const std::vector<std::string>& runs) {
  std::vector<std::string> out;
  std::map<std::string, int> seen;
  for (const auto& r : runs)
    ++seen[fs::path(r).lexically_normal().filename().string()];
  for (const auto& r : runs) {
    const auto p = fs::path(r).lexically_normal();
    const auto name = p.filename().string();
    out.push_back(seen[name] > 1 ? (p.parent_path().filename() / p.filename()).string() : name);
  }
  return out;
}

/// The config keys whose values differ between the runs (a key one run
/// lacks shows "-").
std::string differing_keys(const std::vector<std::string>& runs, const std::vector<std::string>& labels) {
  std::vector<std::map<std::string, std::string>> cfgs;
  std::set<std::string> keys;
  for (const auto& r : runs) {
    std::map<std::string, std::string> m;
    for (auto& [k, v] : flat_config(r + "/config.toml")) {
      if (k == "experiment.run_id") // every run's own: it says nothing of how they differ
        continue;
      keys.insert(k);
      m[k] = v;
    }
    cfgs.push_back(std::move(m));
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& k : keys) {
    std::vector<std::string> row{k};
    std::set<std::string> distinct;
    for (const auto& c : cfgs) {
      const auto it = c.find(k);
      row.push_back(it == c.end() ? "-" : it->second);
      distinct.insert(row.back());
    }
    if (distinct.size() > 1)
      rows.push_back(std::move(row));
  }
  std::vector<std::string> head{"key"};
  head.insert(head.end(), labels.begin(), labels.end());
  if (rows.empty())
    return "<p>Every config key has the same value in every run (config.toml): they differ only in timing.</p>\n";
  return table(head, rows);
}

/// The runs' figures, one column each.
std::string figures_table(const std::vector<json>& summaries, const std::vector<std::string>& labels) {
  std::vector<std::string> head{"figure"};
  head.insert(head.end(), labels.begin(), labels.end());
  std::vector<std::vector<std::string>> rows;
  for (const char* k : {"status", "topology", "workers", "model", "optimizer", "samples_per_sec", "wall_seconds",
                        "final_test_accuracy", "final_test_loss", "final_loss", "time_to_target", "bytes_sent"}) {
    std::vector<std::string> row{k};
    for (const auto& s : summaries)
      row.push_back(shown(s.value(k, json())));
    rows.push_back(std::move(row));
  }
  for (const char* k : {"mean", "p99", "max"}) {
    std::vector<std::string> row{std::string("staleness ") + k};
    for (const auto& s : summaries)
      row.push_back(s.contains("staleness") && s["staleness"].is_object() ? shown(s["staleness"].value(k, json())) : "n/a");
    rows.push_back(std::move(row));
  }
  std::vector<std::string> error{"compression error"}; // n/a for a dense run
  for (const auto& s : summaries)
    error.push_back(s.contains("compress") && s["compress"].is_object() ? shown(s["compress"].value("error", json())) : "n/a");
  rows.push_back(std::move(error));
  return table(head, rows);
}

} // namespace

std::vector<std::pair<std::string, std::string>> flat_config(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!fs::exists(path))
    return out;
  try {
    flatten(toml::parse_file(path), "", out);
  } catch (const toml::parse_error& e) {
    throw error(path + ": not valid TOML: " + std::string(e.description()));
  }
  return out;
}

report_outcome write_comparison(const std::vector<std::string>& runs, const std::string& out_dir, bool force) {
  check(runs.size() >= 2, "gradwire compare: give two or more run folders");
  for (const auto& r : runs)
    check(fs::is_directory(r), r + (fs::exists(r) ? ": not a folder" : ": no such folder") + " (compare takes run folders)");
  claim_compare_folder(out_dir, force);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  check(!ec, "cannot create " + out_dir + ": " + ec.message());
  const auto labels = labels_of(runs);
  // The runs as the points of a sweep: every point's curves overlaid.
  json points = json::array();
  std::vector<json> summaries;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    check(fs::exists(r + "/summary.json") || fs::exists(r + "/metrics.jsonl"),
          r + ": not a run folder (no summary.json or metrics.jsonl); a sweep's points are its point-NNN folders");
    json s = fs::exists(r + "/summary.json") ? read_json(r + "/summary.json") : json::object();
    summaries.push_back(s);
    s["sweep_point"] = labels[i];
    s["point_dir"] = fs::relative(fs::absolute(r), fs::absolute(out_dir)).string();
    points.push_back(std::move(s));
  }
  report_outcome out;
  auto specs = sweep_plots(out_dir, {{"points", points}});
  auto po = draw_plots(out_dir + "/plots", specs);
  out.plots = po.files.size();
  out.problem = po.problem;
  std::string body = "<p class=\"meta\">";
  for (std::size_t i = 0; i < runs.size(); ++i)
    body += (i ? ", " : "") + esc(labels[i]) + ": " + esc(fs::absolute(runs[i]).lexically_normal().string());
  body += "</p>\n<h2>Figures</h2>\n" + figures_table(summaries, labels);
  body += "<h2>Config keys that differ</h2>\n" + differing_keys(runs, labels);
  body += "<h2>Plots</h2>\n" + figures(po, specs);
  json listed = json::array();
  for (const auto& r : runs)
    listed.push_back(fs::absolute(r).lexically_normal().string());
  std::ofstream(out_dir + "/compare.json") << json{{"runs", listed}}.dump(2) << "\n"; // what makes the folder a comparison's
  out.html = out_dir + "/report.html";
  std::ofstream(out.html + ".tmp") << page("gradwire compare: " + std::to_string(runs.size()) + " runs", body);
  fs::rename(out.html + ".tmp", out.html);
  return out;
}

} // namespace gradwire::scheduler
