#include "scheduler/app/report_plots.hpp"
#include "scheduler/app/json_number.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace gradwire::scheduler {
namespace {

using json = nlohmann::json;

using marks = std::vector<std::pair<double, std::string>>;

/// Lost workers (and their return), marked where the curves are over time
/// or over steps.
void fault_marks(const json& summary, marks& at_time, marks& at_step) {
  for (const auto& f : summary.value("faults", json::array())) {
    const auto label = "worker " + std::to_string(f.value("rank", 0)) + " lost";
    at_time.emplace_back(json_number(f, "detected_at", 0), label);
    at_step.emplace_back(json_number(f, "at_step", 0), label);
    if (f.contains("rejoined_at") && f["rejoined_at"].is_number()) { // its process came back
      const auto back = "worker " + std::to_string(f.value("rank", 0)) + " back";
      at_time.emplace_back(json_number(f, "rejoined_at", 0), back);
      at_step.emplace_back(json_number(f, "rejoined_step", 0), back);
    }
  }
}

/// Where each worker's time went: the fast ones' waiting shows here.
void add_time_split(const json& summary, std::vector<plot_spec>& p) {
  using st = plot_spec::style;
  const auto& workers = summary.value("per_worker", json::array());
  if (workers.size() <= 1 || workers.size() > 32)
    return;
  plot_spec split{"time_split", "where each worker's time went", "worker", "seconds", {}, st::boxes};
  split.box_width = 0.25;
  split.x_tic = 1;
  plot_series compute{"compute", {}}, exchange{"exchange (not waiting)", {}}, wait{"waiting for others", {}};
  for (const auto& w : workers) {
    const double r = w.value("worker", 0);
    const double c = json_number(w, "compute_seconds", 0), m = json_number(w, "comm_seconds", 0), wt = json_number(w, "wait_seconds", 0);
    compute.xy.emplace_back(r - 0.25, c);
    exchange.xy.emplace_back(r, std::max(0.0, m - wt));
    wait.xy.emplace_back(r + 0.25, wt);
  }
  split.series = {compute, exchange, wait};
  p.push_back(std::move(split));
}

/// Staleness: of all pushes, per worker, and per worker against time (how
/// stale a slow worker's gradients are while the others still run).
void add_staleness(const json& summary, const std::vector<json>& records, const std::string& against,
                   const std::string& secs, const marks& at_time, std::vector<plot_spec>& p) {
  using st = plot_spec::style;
  plot_spec all{"staleness", "staleness of applied gradients (all workers)", "staleness (versions)", "fraction of pushes",
                {{"all pushes", fractions(summary["staleness"]["histogram"])}}, st::boxes};
  all.x_from = true; // staleness is never negative: the bar at 0 starts the axis
  all.x_min = -0.5;
  p.push_back(std::move(all));
  const auto& pw = summary.value("per_worker", json::array());
  if (pw.size() > 1 && pw.size() <= 16) {
    plot_spec per{"staleness_per_worker", "staleness per worker (log scale)", "staleness (versions)", "fraction of its pushes",
                  {}, st::linespoints};
    per.log_y = true;
    per.x_from = true;
    for (const auto& w : pw)
      if (w.contains("staleness"))
        per.series.push_back({fmt::format("worker {} (slowdown {:.3g})", w.value("worker", 0), w.value("slowdown", 1.0)),
                              fractions(w["staleness"]["histogram"])});
    p.push_back(std::move(per));
  }
  if (auto over_time = per_worker(records, "time", "staleness"); !over_time.empty()) {
    p.push_back({"staleness_time", "staleness " + against + ", per worker (mean of each log window)", secs,
                 "staleness (versions)", values_of(over_time, 16), st::lines});
    p.back().marks = at_time;
  }
}

/// compression.kind: what each worker's payloads held back, window by window.
void add_compress_error(const std::vector<json>& records, std::vector<plot_spec>& p) {
  auto by_worker = per_worker(records, "step", "compress_error");
  if (by_worker.empty())
    return;
  p.push_back({"compress_error", "compression error per worker (mean of each log window)", "step (per worker)",
               "held back: |c - D(C(c))|^2 / |c|^2", values_of(by_worker, 16), plot_spec::style::lines});
  p.back().y_max = 1;
}

} // namespace

std::vector<plot_spec> run_plots(const json& summary, const std::vector<json>& records) {
  // A run on the virtual clock: its times are virtual seconds (virtual_run.hpp).
  const bool virt = summary.contains("clock") && summary["clock"].is_object() &&
                    summary["clock"].value("mode", "") == "virtual";
  const std::string against = virt ? "against virtual time" : "against wall time";
  const std::string secs = virt ? "virtual seconds" : "seconds";
  std::map<int, plot_series> loss_t, loss_s;
  plot_series acc_t, acc_s;
  curves(records, "", loss_t, loss_s, acc_t, acc_s);
  // Against samples (each worker's own) and epochs as well.
  std::map<int, plot_series> loss_n;
  plot_series acc_e{"test accuracy", {}};
  for (const auto& r : records) {
    const auto type = r.value("type", std::string());
    if (type == "step" && r.contains("samples")) {
      const int w = r.value("worker", 0);
      loss_n[w].title = "worker " + std::to_string(w);
      loss_n[w].xy.emplace_back(json_number(r, "samples"), json_number(r, "loss"));
    } else if (type == "eval" && r.contains("epoch"))
      acc_e.xy.emplace_back(json_number(r, "epoch"), 100 * json_number(r, "test_accuracy"));
  }
  using st = plot_spec::style;
  std::vector<plot_spec> p;
  marks at_time, at_step;
  fault_marks(summary, at_time, at_step);
  p.push_back({"loss_time", "training loss " + against, secs, "loss", values_of(loss_t, 16), st::lines});
  p.back().marks = at_time;
  p.push_back({"loss_steps", "training loss against steps", "step (per worker)", "loss", values_of(loss_s, 16), st::lines});
  p.back().marks = at_step;
  p.push_back({"accuracy_time", "test accuracy " + against, secs, "test accuracy (%)", {acc_t}, st::linespoints});
  p.back().marks = at_time;
  p.push_back({"accuracy_steps", "test accuracy against steps", "step (per worker)", "test accuracy (%)", {acc_s}, st::linespoints});
  p.back().marks = at_step;
  if (const double tps = tokens_per_sample(summary); tps > 0) {
    for (auto& [w, series] : loss_n)
      for (auto& xy : series.xy)
        xy.first *= tps;
    p.push_back({"loss_tokens", "training loss against tokens", "tokens (per worker)", "loss (nats per token)",
                 values_of(loss_n, 16), st::lines});
    p.push_back({"test_loss_time", "validation loss " + against, secs, "loss (nats per token)",
                 {test_loss_curve(records, "")}, st::linespoints});
    p.back().marks = at_time;
    if (auto vb = validation_loss_bytes(records, ""); !vb.xy.empty())
      p.push_back({"test_loss_bytes", "validation loss against bytes sent (worker 0)", "MB sent by worker 0",
                   "loss (nats per token)", {vb}, st::linespoints});
  } else {
    p.push_back({"loss_samples", "training loss against samples", "samples (per worker)", "loss", values_of(loss_n, 16),
                 st::lines});
  }
  p.push_back({"accuracy_epochs", "test accuracy against epochs", "epoch", "test accuracy (%)", {acc_e}, st::linespoints});
  if (auto lb = loss_bytes_curve(records, ""); !lb.xy.empty())
    p.push_back({"loss_bytes", "training loss against bytes sent (worker 0)", "MB sent by worker 0", "loss", {lb},
                 st::lines});
  add_time_split(summary, p);
  add_compress_error(records, p);
  if (has_staleness(summary))
    add_staleness(summary, records, against, secs, at_time, p);
  return p;
}

namespace {

/// The staleness of the workers with the largest slowdown of a
/// heterogeneous point, their histograms summed; null where no worker is slowed.
json slowest_histogram(const json& point) {
  const auto& pw = point.value("per_worker", json::array());
  double top = 1;
  for (const auto& w : pw)
    top = std::max(top, w.value("slowdown", 1.0));
  if (top <= 1)
    return nullptr;
  json sum = json::array();
  for (const auto& w : pw)
    if (w.value("slowdown", 1.0) == top && w.contains("staleness"))
      for (std::size_t k = 0; k < w["staleness"]["histogram"].size(); ++k) {
        while (sum.size() <= k)
          sum.push_back(0.0);
        sum[k] = sum[k].get<double>() + w["staleness"]["histogram"][k].get<double>();
      }
  return sum;
}

/// Speedup and efficiency against workers, from each worker count's mean
/// throughput (against the fewest workers being perfectly efficient).
void add_scaling(const std::map<int, std::vector<double>>& thr_by_workers, std::vector<plot_spec>& p) {
  using st = plot_spec::style;
  const int w0 = thr_by_workers.begin()->first;
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v)
      s += x;
    return s / static_cast<double>(v.size());
  };
  const double t0 = mean(thr_by_workers.begin()->second);
  plot_series speed{"measured", {}}, eff{"measured", {}};
  for (const auto& [w, v] : thr_by_workers) {
    const double sp = mean(v) / t0 * w0;
    speed.xy.emplace_back(w, sp);
    eff.xy.emplace_back(w, 100 * sp / w);
  }
  plot_spec s{"speedup", "speedup against workers", "workers", "speedup (throughput / throughput of the fewest)", {speed}, st::linespoints};
  s.ideal_diagonal = true;
  plot_spec e{"efficiency", "scaling efficiency against workers", "workers", "efficiency (%)", {eff}, st::linespoints};
  e.y_min = 0;
  e.y_max = 110;
  p.push_back(std::move(s));
  p.push_back(std::move(e));
}

/// Every point's curves, its seeds together (in the points' order), and
/// what the sweep's plots gather from each point.
struct sweep_curves {
  std::vector<std::string> order;
  std::map<std::string, std::vector<plot_series>> at_by, as_by, loss_by, test_loss_by, bytes_by, test_bytes_by;
  marks lost_at, lost_step; ///< each point's lost workers (a few)
  std::map<int, std::vector<double>> thr_by_workers;

  /// Reads a point's metrics; returns its label, without the seed.
  std::string add(const std::string& dir, const json& s) {
    auto label = s.value("sweep_point", std::string("point"));
    if (label.rfind("variant=", 0) == 0)
      label = label.substr(8);
    for (const auto& f : s.value("faults", json::array())) {
      const auto what = "worker " + std::to_string(f.value("rank", 0)) + " lost (" + label + ")";
      lost_at.emplace_back(json_number(f, "detected_at", 0), what);
      lost_step.emplace_back(json_number(f, "at_step", 0), what);
    }
    const auto pdir = dir + "/" + s.value("point_dir", std::string());
    std::map<int, plot_series> lt, ls;
    plot_series at, as;
    const auto records = read_records(pdir + "/metrics.jsonl");
    curves(records, label, lt, ls, at, as);
    const auto base = without_seed(label);
    if (s.contains("tokens")) {
      test_loss_by[base].push_back(test_loss_curve(records, label));
      if (auto vb = validation_loss_bytes(records, label); !vb.xy.empty())
        test_bytes_by[base].push_back(std::move(vb));
    }
    if (auto lb = loss_bytes_curve(records, label); !lb.xy.empty())
      bytes_by[base].push_back(std::move(lb));
    if (!at_by.count(base))
      order.push_back(base);
    at_by[base].push_back(std::move(at));
    as_by[base].push_back(std::move(as));
    if (!lt.empty())
      loss_by[base].push_back(std::move(lt.begin()->second));
    thr_by_workers[s.value("workers", 1)].push_back(json_number(s, "samples_per_sec", 0));
    return base;
  }
};

/// Every point's curve in c.*by[g], for each point g that has one (24 at most).
plot_spec overlay(const sweep_curves& c, const std::map<std::string, std::vector<plot_series>>& by, plot_spec spec) {
  for (const auto& g : c.order)
    if (const auto it = by.find(g); it != by.end() && spec.series.size() < 24)
      spec.series.push_back(over_repeats(g, it->second));
  return spec;
}

/// The loss curves a sweep compares beyond accuracy: a language model's
/// validation loss against time (first) and against bytes, and training
/// loss against bytes (what each point's exchange cost: compression,
/// local steps).
void add_loss_plots(const sweep_curves& c, std::vector<plot_spec>& p) {
  using st = plot_spec::style;
  if (!c.test_loss_by.empty())
    p.insert(p.begin(), overlay(c, c.test_loss_by,
                                {"test_loss_time", "validation loss against wall time, every point", "seconds",
                                 "loss (nats per token)", {}, st::linespoints}));
  if (!c.test_bytes_by.empty()) { // on a log axis: the points' bytes differ by orders of magnitude
    plot_spec vb{"test_loss_bytes", "validation loss against MB worker 0 sent, every point (log scale)",
                 "MB sent by worker 0", "loss (nats per token)", {}, st::linespoints};
    vb.log_x = true;
    p.push_back(overlay(c, c.test_bytes_by, std::move(vb)));
  }
  if (!c.bytes_by.empty())
    p.push_back(overlay(c, c.bytes_by,
                        {"loss_bytes", "training loss (worker 0) against MB it sent, every point", "MB sent by worker 0",
                         "loss", {}, st::lines}));
}

} // namespace

std::vector<plot_spec> sweep_plots(const std::string& dir, const json& sweep) {
  using st = plot_spec::style;
  plot_spec acc{"accuracy_time", "test accuracy against wall time, every point", "seconds", "test accuracy (%)", {}, st::linespoints};
  plot_spec acc_steps{"accuracy_steps", "test accuracy against steps, every point", "step (per worker)", "test accuracy (%)",
                      {}, st::linespoints};
  plot_spec loss{"loss_time", "training loss (worker 0) against wall time, every point", "seconds", "loss", {}, st::lines};
  plot_spec stale{"staleness", "staleness of applied gradients per point (log scale)", "staleness (versions)",
                  "fraction of pushes", {}, st::linespoints};
  stale.log_y = true;
  stale.x_from = true;
  plot_spec slow{"staleness_slowest", "staleness of the slowest workers' gradients per point (log scale)",
                 "staleness (versions)", "fraction of their pushes", {}, st::linespoints};
  slow.log_y = true;
  slow.x_from = true;
  sweep_curves c;
  for (const auto& s : sweep.value("points", json::array())) {
    const auto label = c.add(dir, s);
    if (has_staleness(s) && stale.series.size() < 24)
      stale.series.push_back({label, fractions(s["staleness"]["histogram"])});
    if (has_staleness(s) && slow.series.size() < 24) // heterogeneous points: the most slowed workers together
      if (auto sum = slowest_histogram(s); !sum.is_null())
        slow.series.push_back({label, fractions(sum)});
  }
  for (const auto& g : c.order) {
    if (acc.series.size() >= 24)
      break;
    acc.series.push_back(over_repeats(g, c.at_by[g]));
    acc_steps.series.push_back(over_repeats(g, c.as_by[g]));
    if (c.loss_by.count(g))
      loss.series.push_back(over_repeats(g, c.loss_by[g]));
  }
  if (c.lost_at.size() <= 12) { // more would hide the curves
    acc.marks = loss.marks = c.lost_at;
    acc_steps.marks = c.lost_step;
  }
  std::vector<plot_spec> p{acc, acc_steps, loss};
  add_loss_plots(c, p);
  // Scaling: only when the worker count is what the rows differ in.
  if (c.thr_by_workers.size() > 1 && sweep.value("rows", json::array()).size() == c.thr_by_workers.size())
    add_scaling(c.thr_by_workers, p);
  if (!stale.series.empty())
    p.push_back(std::move(stale));
  if (!slow.series.empty())
    p.push_back(std::move(slow));
  return p;
}

} // namespace gradwire::scheduler
