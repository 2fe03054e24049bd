#include "scheduler/results.hpp"

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

} // namespace gradwire::scheduler
