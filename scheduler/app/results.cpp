#include "scheduler/app/results.hpp"

#include "kernels/error.hpp"

#include <filesystem>
#include <fstream>

namespace gradwire::scheduler {

results_writer::results_writer(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  check(!ec, "cannot create results folder " + dir_ + ": " + ec.message());
  const auto path = (std::filesystem::path(dir_) / "metrics.jsonl").string();
  metrics_.open(path, std::ios::trunc);
  check(metrics_.good(), "cannot write " + path);
}

namespace {

/// What gradwire writes into a run's or a sweep's folder.
bool ours(const std::filesystem::path& p) {
  const auto name = p.filename().string();
  static const char* const files[] = {"summary.json", "metrics.jsonl", "config.toml", "trace.json", "report.html",
                                      "plots", "sweep.md", "sweep.csv", "sweep.json"};
  for (const char* f : files)
    if (name == f)
      return true;
  return name.rfind("trace-rank", 0) == 0 || name.rfind("point-", 0) == 0 ||
         (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0);
}

} // namespace

void claim_results_folder(const std::string& dir, bool force, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return;
  check(fs::is_directory(dir, ec), "results folder " + dir + " exists and is not a folder: choose another with --out DIR");
  std::vector<fs::path> earlier;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (ours(e.path()))
      earlier.push_back(e.path());
  if (earlier.empty())
    return; // an empty folder, or one of the user's own: nothing of ours to overwrite
  if (!force) {
    std::string status;
    const auto summary = fs::path(dir) / "summary.json";
    if (std::ifstream in(summary); in) {
      const auto j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_object() && j.contains("status") && j["status"].is_string())
        status = " (" + j["status"].get<std::string>() + ")";
    }
    throw error("results folder " + dir + " already holds a " +
                (fs::exists(fs::path(dir) / "sweep.json") ? std::string("sweep") : std::string("run")) + status +
                ": nothing is overwritten. Give this " + what + " another folder with --out DIR, or replace that one " +
                "with --force");
  }
  for (const auto& p : earlier) {
    fs::remove_all(p, ec);
    check(!ec, "--force: cannot remove " + p.string() + ": " + ec.message());
  }
}

void results_writer::metric(const nlohmann::json& record) {
  metrics_ << record.dump() << '\n';
  if (++unflushed_ >= 64) {
    metrics_.flush();
    unflushed_ = 0;
  }
}

void results_writer::write_file(const std::string& name, const std::string& text) const {
  const auto path = std::filesystem::path(dir_) / name;
  const auto tmp = std::filesystem::path(dir_) / (name + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    check(out.good(), "cannot write " + tmp.string());
    out << text;
    out.flush();
    check(out.good(), "error writing " + tmp.string() + " (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

void results_writer::write_summary(const nlohmann::json& summary) const {
  write_file("summary.json", summary.dump(2) + "\n");
}

nlohmann::json staleness_summary(const std::vector<std::int64_t>& h) {
  std::int64_t n = 0;
  double sum = 0;
  for (std::size_t k = 0; k < h.size(); ++k) {
    n += h[k];
    sum += static_cast<double>(k) * static_cast<double>(h[k]);
  }
  auto quantile = [&](double q) -> std::int64_t {
    std::int64_t seen = 0;
    for (std::size_t k = 0; k < h.size(); ++k) {
      seen += h[k];
      if (static_cast<double>(seen) >= q * static_cast<double>(n))
        return static_cast<std::int64_t>(k);
    }
    return 0;
  };
  std::int64_t max = 0;
  for (std::size_t k = 0; k < h.size(); ++k)
    if (h[k] > 0)
      max = static_cast<std::int64_t>(k);
  return {{"mean", n ? sum / static_cast<double>(n) : 0.0}, {"p50", quantile(0.5)},
          {"p99", quantile(0.99)}, {"max", max}, {"histogram", h}, {"count", n}};
}

std::vector<std::int64_t> histogram_of(const std::vector<std::int64_t>& values) {
  std::vector<std::int64_t> h;
  for (auto v : values) {
    const auto i = static_cast<std::size_t>(v < 0 ? 0 : v);
    if (h.size() <= i)
      h.resize(i + 1, 0);
    ++h[i];
  }
  return h;
}

} // namespace gradwire::scheduler
