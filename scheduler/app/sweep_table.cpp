#include "scheduler/app/sweep_table.hpp"
#include "scheduler/app/json_number.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace gradwire::scheduler {

namespace {

/// A value as a table shows it: TOML strings without their quotes.
std::string as_cell(const std::string& v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
    return v.substr(1, v.size() - 2);
  return v;
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

using group = std::vector<const sweep_point*>;

stat metric(const group& ps, const char* key) {
  std::vector<double> xs;
  for (const auto* p : ps)
    xs.push_back(json_number(p->summary, key));
  return of(xs);
}

/// The slowest workers' staleness tail (heterogeneous runs): p99 over the
/// workers with the largest slowdown, when some are slower than others.
stat slow_p99(const group& ps) {
  std::vector<double> xs;
  for (const auto* p : ps) {
    const auto& pw = p->summary.value("per_worker", nlohmann::json::array());
    double top = 1, p99 = std::nan("");
    for (const auto& w : pw)
      top = std::max(top, w.value("slowdown", 1.0));
    for (const auto& w : pw)
      if (top > 1 && w.value("slowdown", 1.0) == top && w.contains("staleness"))
        p99 = std::isnan(p99) ? json_number(w["staleness"], "p99") : std::max(p99, json_number(w["staleness"], "p99"));
    xs.push_back(p99);
  }
  return of(xs);
}

/// summary[object][key] over the points (n/a where the object is absent or
/// null: staleness of a single run, step_time off lockstep topologies).
stat nested(const group& ps, const char* object, const char* key) {
  std::vector<double> xs;
  for (const auto* p : ps) {
    const auto it = p->summary.find(object);
    xs.push_back(it != p->summary.end() && it->is_object() ? json_number(*it, key) : std::nan(""));
  }
  return of(xs);
}

nlohmann::json or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

/// Repeats grouped (points equal on every axis but experiment.seed), in first-seen order.
std::vector<group> group_repeats(const std::vector<sweep_point>& done, const std::vector<std::size_t>& axes_shown) {
  std::vector<group> groups;
  std::map<std::string, std::size_t> index;
  for (const auto& p : done) {
    std::string g;
    for (auto k : axes_shown)
      g += p.values[k] + "\x1f";
    auto [it, fresh] = index.emplace(g, groups.size());
    if (fresh)
      groups.emplace_back();
    groups[it->second].push_back(&p);
  }
  return groups;
}

/// Speedup's reference: the throughput of the group with the fewest workers.
struct baseline {
  double thr = std::nan("");
  int workers = 1 << 30;
  bool same_workers = true; ///< every group has as many workers: no efficiency
};

baseline baseline_of(const std::vector<group>& groups) {
  baseline b;
  const int first = groups.front().front()->summary.value("workers", 1);
  for (const auto& ps : groups) {
    const int w = ps.front()->summary.value("workers", 1);
    b.same_workers = b.same_workers && w == first;
    if (w < b.workers) {
      b.workers = w;
      b.thr = metric(ps, "samples_per_sec").mean;
    }
  }
  return b;
}

/// A CSV field as RFC 4180 writes it: quoted, its quotes doubled, where
/// it holds a comma, a quote or a line break (variant names may).
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos)
    return v;
  std::string out = "\"";
  for (char c : v)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void add_header(sweep_table& t, const std::vector<std::string>& keys) {
  t.md = "| ";
  for (const auto& k : keys) {
    t.md += k + " | ";
    t.csv += csv_field(k) + ",";
  }
  t.md += "runs | samples/s | speedup | efficiency | test accuracy | time to target (s) | final loss | staleness mean | "
          "staleness p99 | slowest workers' p99 | waiting for slower | exchange | workers lost | unfinished runs |\n|";
  t.csv += "runs,samples_per_sec,samples_per_sec_sd,speedup,efficiency,final_test_accuracy,final_test_accuracy_sd,"
           "time_to_target,final_loss,staleness_mean,staleness_p99,slowest_workers_staleness_p99,imbalance,exchange,"
           "workers_lost,unfinished\n";
  for (std::size_t k = 0; k < keys.size() + 14; ++k)
    t.md += "---|";
  t.md += "\n";
}

void add_row(sweep_table& t, const group& ps, const baseline& b, const std::vector<std::size_t>& axes_shown,
             const std::vector<std::string>& keys) {
  const auto thr = metric(ps, "samples_per_sec"), acc = metric(ps, "final_test_accuracy"),
             loss = metric(ps, "final_loss"), sm = nested(ps, "staleness", "mean"), sp = nested(ps, "staleness", "p99"),
             slow = slow_p99(ps), ttt = metric(ps, "time_to_target"), // n/a where a run never reached it
    imb = nested(ps, "step_time", "imbalance"), exch = nested(ps, "step_time", "exchange");
  const int w = ps.front()->summary.value("workers", 1);
  const double speedup = thr.mean / b.thr;
  double lost = 0; // per run: the faults it met ([[faults]], or real ones)
  for (const auto* p : ps)
    lost += static_cast<double>(p->summary.value("faults", nlohmann::json::array()).size());
  lost /= static_cast<double>(ps.size());
  // Runs stopped early (a sweep interrupted in its last point) or failed:
  // their figures are not the configuration's, and the row says so.
  std::size_t unfinished = 0;
  for (const auto* p : ps)
    unfinished += p->summary.value("status", std::string("completed")) != "completed";
  // Efficiency only where the worker count varies; otherwise speedup is
  // the throughput relative to the first row.
  const double eff = b.same_workers ? std::nan("") : speedup * b.workers / w;
  nlohmann::json row;
  t.md += "| ";
  for (std::size_t k = 0; k < axes_shown.size(); ++k) {
    const auto v = as_cell(ps.front()->values[axes_shown[k]]);
    row[keys[k]] = v;
    t.md += v + " | ";
    t.csv += csv_field(v) + ",";
  }
  row.update({{"runs", ps.size()}, {"samples_per_sec", thr.mean}, {"speedup", speedup}, {"efficiency", or_null(eff)},
              {"final_test_accuracy", acc.mean}, {"time_to_target", or_null(ttt.mean)}, {"final_loss", loss.mean},
              {"staleness_mean", sm.mean}, {"staleness_p99", sp.mean},
              {"slowest_workers_staleness_p99", or_null(slow.mean)}, {"imbalance", or_null(imb.mean)},
              {"exchange", or_null(exch.mean)}, {"workers_lost", lost}, {"unfinished", unfinished}});
  if (const auto sent = metric(ps, "bytes_sent"); sent.mean > 0 && w > 0) // what the exchange cost
    row["mb_sent_per_worker"] = sent.mean / w / 1e6;
  if (const auto err = nested(ps, "compress", "error"); !std::isnan(err.mean)) // the compressed points
    row["compress_error"] = err.mean;
  if (ps.front()->summary.contains("tokens")) // a language model: the figures it is compared by
    row.update({{"tokens_per_sec", metric(ps, "tokens_per_sec").mean},
                {"final_test_loss", metric(ps, "final_test_loss").mean}});
  t.rows.push_back(row);
  std::size_t reached = 0;
  for (const auto* p : ps)
    reached += p->summary.contains("time_to_target") && p->summary["time_to_target"].is_number();
  auto ttt_cell = cell(ttt, "{:.2f}");
  if (reached > 0 && reached < ps.size())
    ttt_cell += fmt::format(" ({} of {})", reached, ps.size());
  t.md += fmt::format("{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3g} | {} |\n", ps.size(), cell(thr, "{:.0f}"),
                      std::isnan(speedup) ? std::string("n/a") : fmt::format("{:.2f}", speedup), std::isnan(eff) ? std::string("n/a") : fmt::format("{:.0f}%", 100 * eff),
                      cell(acc, "{:.2f}%", 100), ttt_cell, cell(loss, "{:.4f}"), cell(sm, "{:.2f}"), cell(sp, "{:.1f}"),
                      cell(slow, "{:.1f}"), cell(imb, "{:.1f}%", 100), cell(exch, "{:.1f}%", 100), lost,
                      unfinished == 0 ? std::string("0") : fmt::format("**{} of {}**", unfinished, ps.size()));
  t.csv += fmt::format("{},{:.1f},{:.1f},{:.4f},{:.4f},{:.4f},{:.4f},{:.3f},{:.5f},{:.3f},{:.1f},{:.1f},{:.4f},{:.4f},{:.3g},{}\n",
                       ps.size(), thr.mean, std::isnan(thr.sd) ? 0.0 : thr.sd, speedup, eff, acc.mean,
                       std::isnan(acc.sd) ? 0.0 : acc.sd, ttt.mean, loss.mean, sm.mean, sp.mean, slow.mean, imb.mean,
                       exch.mean, lost, unfinished);
}

} // namespace

sweep_table make_sweep_table(const std::vector<sweep_point>& done, const std::vector<sweep_axis>& axes) {
  std::vector<std::string> keys;
  std::vector<std::size_t> axes_shown; // axes other than the seed
  for (std::size_t k = 0; k < axes.size(); ++k)
    if (axes[k].key != "experiment.seed") {
      axes_shown.push_back(k);
      keys.push_back(axes[k].key);
    }
  const auto groups = group_repeats(done, axes_shown);
  const auto b = baseline_of(groups);
  sweep_table t;
  add_header(t, keys);
  for (const auto& ps : groups)
    add_row(t, ps, b, axes_shown, keys);
  return t;
}

std::pair<double, double> mean_and_sd(const std::vector<double>& xs) {
  const auto s = of(xs);
  return {s.mean, s.sd};
}

} // namespace gradwire::scheduler
