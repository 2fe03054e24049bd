#include "scheduler/app/report_curves.hpp"
#include "scheduler/app/json_number.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>

namespace gradwire::scheduler {

using json = nlohmann::json;

std::vector<std::pair<double, double>> fractions(const json& hist) {
  std::vector<std::pair<double, double>> out;
  if (!hist.is_array())
    return out;
  double total = 0;
  for (const auto& c : hist)
    total += c.get<double>();
  for (std::size_t s = 0; s < hist.size(); ++s)
    if (total > 0)
      out.emplace_back(static_cast<double>(s), hist[s].get<double>() / total);
  return out;
}

bool has_staleness(const json& summary) {
  return summary.contains("staleness") && json_number(summary["staleness"], "count", 0) > 0 && json_number(summary["staleness"], "max", 0) > 0;
}

void curves(const std::vector<json>& records, const std::string& label, std::map<int, plot_series>& loss_t,
            std::map<int, plot_series>& loss_s, plot_series& acc_t, plot_series& acc_s) {
  for (const auto& r : records) {
    const auto type = r.value("type", std::string());
    if (type == "step") {
      const int w = r.value("worker", 0);
      auto& lt = loss_t[w];
      auto& ls = loss_s[w];
      lt.title = ls.title = label.empty() ? "worker " + std::to_string(w) : label;
      lt.xy.emplace_back(json_number(r, "time"), json_number(r, "loss"));
      ls.xy.emplace_back(json_number(r, "step"), json_number(r, "loss"));
    } else if (type == "eval") {
      acc_t.xy.emplace_back(json_number(r, "time"), 100 * json_number(r, "test_accuracy"));
      acc_s.xy.emplace_back(json_number(r, "step"), 100 * json_number(r, "test_accuracy"));
    }
  }
  acc_t.title = acc_s.title = label.empty() ? "test accuracy" : label;
}

plot_series test_loss_curve(const std::vector<json>& records, const std::string& label) {
  plot_series out{label.empty() ? "validation loss" : label, {}};
  for (const auto& r : records)
    if (r.value("type", std::string()) == "eval" && r.contains("test_loss"))
      out.xy.emplace_back(json_number(r, "time"), json_number(r, "test_loss"));
  return out;
}

plot_series loss_bytes_curve(const std::vector<json>& records, const std::string& label) {
  plot_series out{label.empty() ? "worker 0" : label, {}};
  bool any = false;
  for (const auto& r : records)
    if (r.value("type", std::string()) == "step" && r.value("worker", 0) == 0 && r.contains("bytes_sent")) {
      const double mb = json_number(r, "bytes_sent") / 1e6;
      any = any || mb > 0;
      out.xy.emplace_back(mb, json_number(r, "loss"));
    }
  if (!any)
    out.xy.clear();
  return out;
}

plot_series validation_loss_bytes(const std::vector<json>& records, const std::string& label) {
  std::vector<std::pair<double, double>> sent{{0.0, 0.0}}; // (step, MB), worker 0's
  for (const auto& r : records)
    if (r.value("type", std::string()) == "step" && r.value("worker", 0) == 0 && r.contains("bytes_sent"))
      sent.emplace_back(json_number(r, "step"), json_number(r, "bytes_sent") / 1e6);
  std::sort(sent.begin(), sent.end());
  plot_series out{label.empty() ? "validation loss" : label, {}};
  if (sent.back().second <= 0)
    return out;
  for (const auto& r : records) {
    if (r.value("type", std::string()) != "eval" || !r.contains("test_loss"))
      continue;
    const double step = json_number(r, "step");
    const auto hi = std::lower_bound(sent.begin(), sent.end(), std::make_pair(step, -1.0));
    double mb;
    if (hi == sent.end()) // past the last record: at its rate
      mb = sent.back().first > 0 ? sent.back().second * step / sent.back().first : 0;
    else if (hi->first == step || hi == sent.begin())
      mb = hi->second;
    else {
      const auto lo = std::prev(hi);
      mb = lo->second + (hi->second - lo->second) * (step - lo->first) / (hi->first - lo->first);
    }
    out.xy.emplace_back(mb, json_number(r, "test_loss"));
  }
  return out;
}

double tokens_per_sample(const json& summary) {
  const double n = json_number(summary, "samples", 0);
  return summary.contains("tokens") && n > 0 ? json_number(summary, "tokens", 0) / n : 0;
}

std::vector<plot_series> values_of(std::map<int, plot_series>& m, std::size_t limit) {
  std::vector<plot_series> out;
  for (auto& [k, s] : m)
    if (out.size() < limit)
      out.push_back(std::move(s));
  return out;
}

std::map<int, plot_series> per_worker(const std::vector<json>& records, const char* x, const char* y) {
  std::map<int, plot_series> out;
  for (const auto& r : records)
    if (r.value("type", std::string()) == "step" && r.contains(y)) {
      const int w = r.value("worker", 0);
      out[w].title = "worker " + std::to_string(w);
      out[w].xy.emplace_back(json_number(r, x), json_number(r, y));
    }
  return out;
}

std::string without_seed(const std::string& label) {
  std::string out;
  std::size_t from = 0;
  while (from <= label.size()) {
    auto to = label.find(',', from);
    if (to == std::string::npos)
      to = label.size();
    const auto part = label.substr(from, to - from);
    if (part.rfind("experiment.seed=", 0) != 0 && !part.empty())
      out += (out.empty() ? "" : ",") + part;
    from = to + 1;
  }
  return out.empty() ? "every seed" : out;
}

plot_series over_repeats(const std::string& title, const std::vector<plot_series>& reps) {
  if (reps.size() == 1)
    return {title, reps.front().xy, {}};
  std::size_t n = SIZE_MAX;
  for (const auto& r : reps)
    n = std::min(n, r.xy.size());
  plot_series out{fmt::format("{} (mean, band: min-max of {} seeds)", title, reps.size()), {}, {}};
  for (std::size_t i = 0; i < n && n != SIZE_MAX; ++i) {
    double x = 0, y = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& r : reps) {
      x += r.xy[i].first;
      y += r.xy[i].second;
      lo = std::min(lo, r.xy[i].second);
      hi = std::max(hi, r.xy[i].second);
    }
    const auto k = static_cast<double>(reps.size());
    out.xy.emplace_back(x / k, y / k);
    out.band.emplace_back(lo, hi);
  }
  return out;
}

std::vector<json> read_records(const std::string& path, std::vector<std::string>* skipped) {
  std::vector<json> out;
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty())
      continue;
    auto j = json::parse(line, nullptr, false);
    if (j.is_object()) {
      out.push_back(std::move(j));
      continue;
    }
    if (skipped != nullptr) // (eof: the line had no newline, as a run cut off while writing leaves it)
      skipped->push_back("line " + std::to_string(n) + (in.eof() ? ": cut off (the last line, with no newline)"
                                                                : ": not a JSON object"));
  }
  return out;
}

} // namespace gradwire::scheduler
