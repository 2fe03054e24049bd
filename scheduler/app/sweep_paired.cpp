#include "scheduler/app/sweep_paired.hpp"

#include "scheduler/app/json_number.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace gradwire::scheduler {

const char* const paired_note =
  "Unpaired: the variant's real runs minus the first variant's, seed by seed: the algorithm and the two runs' "
  "timing. Paired: the variant replayed on the first variant's record (every update in the recorded order, at its "
  "recorded staleness) minus that run: the algorithm alone. Mean ± sample standard deviation over the seeds.";

namespace {

/// A figure compared, as summary.json names it, and how the table shows it.
struct compared {
  const char* key;
  int digits;
  double scale;
  const char* unit;
  /// A difference (signed), or with `sd` its "± sd"; "n/a" for NaN.
  std::string text(double v, bool sd = false) const {
    if (std::isnan(v))
      return "n/a";
    return sd ? fmt::format("± {:.{}f}{}", v * scale, digits, unit) : fmt::format("{:+.{}f}{}", v * scale, digits, unit);
  }
};
constexpr compared paired_figures[] = {{"final_test_accuracy", 2, 100, " pts"}, {"final_test_loss", 4, 1, ""}};

/// The label of a group of seeds: the variant and the other axes' values.
std::string group_of(const sweep_point& p, const std::vector<sweep_axis>& axes, std::size_t variant_axis) {
  std::string out = p.values[variant_axis];
  for (std::size_t k = 0; k < axes.size(); ++k)
    if (k != variant_axis && axes[k].key != "experiment.seed")
      out += ", " + axes[k].key + "=" + p.values[k];
  return out;
}

struct differences {
  std::vector<double> unpaired, paired, first, variant;
};

nlohmann::json row_of(const std::string& label, const compared& f, const differences& d, std::size_t seeds) {
  const auto u = mean_and_sd(d.unpaired), p = mean_and_sd(d.paired);
  const auto num = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
  return {{"variant", label},
          {"figure", f.key},
          {"seeds", seeds},
          {"unpaired_difference", num(u.first)},
          {"unpaired_sd", num(u.second)},
          {"paired_difference", num(p.first)},
          {"paired_sd", num(p.second)},
          {"first_variant_sd", num(mean_and_sd(d.first).second)},
          {"variant_sd", num(mean_and_sd(d.variant).second)},
          {"spread_ratio", num(p.second > 0 ? u.second / p.second : std::nan(""))}};
}

std::string md_of(const nlohmann::json& rows) {
  std::string md = "\n## Paired: each variant against the first, on the same schedule\n\n|";
  for (const auto& c : paired_columns())
    md += " " + c + " |";
  md += "\n|";
  for (std::size_t i = 0; i < paired_columns().size(); ++i)
    md += "---|";
  md += "\n";
  for (const auto& cells : paired_cells(rows)) {
    md += "|";
    for (const auto& c : cells)
      md += " " + c + " |";
    md += "\n";
  }
  return md + "\n" + paired_note + "\n";
}

} // namespace

const std::vector<std::string>& paired_columns() {
  static const std::vector<std::string> cols = {"variant", "figure", "seeds", "unpaired difference",
                                                "paired difference", "spread of real runs (first, variant)"};
  return cols;
}

std::vector<std::vector<std::string>> paired_cells(const nlohmann::json& rows) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : rows) {
    const auto* f = &paired_figures[0];
    for (const auto& x : paired_figures)
      if (r.value("figure", std::string()) == x.key)
        f = &x;
    const auto pair_of = [&](const char* m, const char* s) {
      const double sd = json_number(r, s);
      return f->text(json_number(r, m)) + (std::isnan(sd) ? "" : " " + f->text(sd, true));
    };
    out.push_back({r.value("variant", std::string()), f->key, std::to_string(r.value("seeds", 0)),
                   pair_of("unpaired_difference", "unpaired_sd"), pair_of("paired_difference", "paired_sd"),
                   f->text(json_number(r, "first_variant_sd"), true) + " / " +
                     f->text(json_number(r, "variant_sd"), true)});
  }
  return out;
}

paired_table make_paired_table(const std::vector<sweep_point>& done, const std::vector<paired_point>& paired,
                               const std::vector<sweep_axis>& axes, std::size_t variant_axis) {
  std::map<std::string, std::pair<std::vector<const paired_point*>, std::size_t>> groups; // label -> points, order
  for (const auto& p : paired) {
    auto& g = groups[group_of(done[p.real], axes, variant_axis)];
    if (g.first.empty())
      g.second = groups.size();
    g.first.push_back(&p);
  }
  std::vector<std::pair<std::size_t, std::string>> order;
  for (const auto& [label, g] : groups)
    order.emplace_back(g.second, label);
  std::sort(order.begin(), order.end());
  paired_table t;
  for (const auto& [i, label] : order) {
    const auto& ps = groups[label].first;
    for (const auto& f : paired_figures) {
      differences d;
      for (const auto* p : ps) {
        const double first = json_number(done[p->base].summary, f.key);
        d.first.push_back(first);
        d.variant.push_back(json_number(done[p->real].summary, f.key));
        d.unpaired.push_back(d.variant.back() - first);
        d.paired.push_back(json_number(p->summary, f.key) - first);
      }
      t.rows.push_back(row_of(label, f, d, ps.size()));
    }
  }
  t.md = md_of(t.rows);
  return t;
}

} // namespace gradwire::scheduler
