#include "scheduler/app/results.hpp"

#include "kernels/error.hpp"

#include <filesystem>

namespace gradwire::scheduler {

results_writer::results_writer(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  check(!ec, "cannot create results folder " + dir_ + ": " + ec.message());
  const auto path = (std::filesystem::path(dir_) / "metrics.jsonl").string();
  metrics_.open(path, std::ios::trunc);
  check(metrics_.good(), "cannot write " + path);
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
