#include "scheduler/app/tensorboard.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/tensorboard_event.pb.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

namespace gradwire::scheduler {
namespace {

namespace fs = std::filesystem;

std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1; // Castagnoli, reflected
    t[i] = c;
  }
  return t;
}

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

/// One TFRecord: length, its masked CRC, the data, the data's masked CRC.
std::string tf_record(const std::string& data) {
  std::string out;
  put_le(out, data.size(), 8);
  const auto len_crc = masked_crc32c(out.data(), 8);
  put_le(out, len_crc, 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string host_name() {
  char h[256] = {};
  return ::gethostname(h, sizeof h - 1) == 0 ? std::string(h) : std::string("localhost");
}

double now_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// The numbers of `keys` that the record holds, under their tags.
void take(const nlohmann::json& r, std::vector<std::pair<std::string, double>>& out,
          std::initializer_list<std::pair<const char*, const char*>> keys, double scale = 1) {
  for (const auto& [key, tag] : keys)
    if (auto it = r.find(key); it != r.end() && it->is_number())
      out.emplace_back(tag, it->get<double>() * scale);
}

} // namespace

std::uint32_t crc32c(const void* data, std::size_t n) {
  static const auto table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i)
    c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const auto c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

tensorboard_writer::tensorboard_writer(std::string dir, double wall_start)
    : dir_(std::move(dir)), wall_start_(wall_start) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  check(!ec, "cannot create " + dir_ + ": " + ec.message());
}

std::ofstream& tensorboard_writer::run(const std::string& name) {
  auto it = runs_.find(name);
  if (it != runs_.end())
    return it->second;
  const fs::path folder = name.empty() ? fs::path(dir_) : fs::path(dir_) / name;
  std::error_code ec;
  fs::create_directories(folder, ec);
  const auto path =
    folder / fmt::format("events.out.tfevents.{}.{}", static_cast<long long>(wall_start_), host_name());
  std::ofstream out(path, std::ios::binary | std::ios::app);
  check(out.good(), "cannot write " + path.string());
  tensorflow::Event first; // what TensorBoard reads a file's format from
  first.set_wall_time(wall_start_);
  first.set_file_version("brain.Event:2");
  out << tf_record(first.SerializeAsString());
  return runs_.emplace(name, std::move(out)).first->second;
}

void tensorboard_writer::write_scalars(const std::string& run_name, std::int64_t step, double wall,
                                       const std::vector<std::pair<std::string, double>>& scalars) {
  if (scalars.empty())
    return;
  tensorflow::Event e;
  e.set_wall_time(wall);
  e.set_step(step);
  auto* summary = e.mutable_summary();
  for (const auto& [tag, v] : scalars) {
    auto* value = summary->add_value();
    value->set_tag(tag);
    value->set_simple_value(static_cast<float>(v));
  }
  run(run_name) << tf_record(e.SerializeAsString());
}

void tensorboard_writer::add_step(const nlohmann::json& r) {
  const int worker = r.value("worker", 0);
  const auto step = r.value("step", std::int64_t{0});
  const double time = r.value("time", 0.0);
  std::vector<std::pair<std::string, double>> s;
  take(r, s, {{"loss", "train/loss"}, {"train_accuracy", "train/accuracy"}, {"staleness", "staleness/mean"},
              {"staleness_p99", "staleness/p99"}, {"compute_ms", "time/compute_ms"}, {"comm_ms", "time/comm_ms"},
              {"wait_ms", "time/wait_ms"}, {"compress_error", "compress/error"}});
  take(r, s, {{"bytes_sent", "bytes/sent_mb"}, {"bytes_received", "bytes/received_mb"}}, 1e-6);
  const auto samples = r.value("samples", std::int64_t{0});
  auto& last = last_[worker];
  if (time > last.time && samples >= last.samples)
    s.emplace_back("train/samples_per_sec", static_cast<double>(samples - last.samples) / (time - last.time));
  last = {time, samples};
  write_scalars("worker-" + std::to_string(worker), step, wall_start_ + time, s);
  if (worker == 0) {
    std::vector<std::pair<std::string, double>> lr;
    take(r, lr, {{"lr", "train/lr"}});
    write_scalars("", step, wall_start_ + time, lr);
  }
}

void tensorboard_writer::add(const nlohmann::json& record) {
  const auto type = record.value("type", std::string());
  if (type == "step") {
    add_step(record);
  } else if (type == "eval") {
    std::vector<std::pair<std::string, double>> s;
    take(record, s, {{"test_accuracy", "eval/test_accuracy"}, {"test_loss", "eval/test_loss"}});
    write_scalars("", record.value("step", std::int64_t{0}), wall_start_ + record.value("time", 0.0), s);
  }
}

void tensorboard_writer::flush() {
  for (auto& [name, out] : runs_) {
    out.flush();
    check(out.good(), "cannot write " + (name.empty() ? dir_ : dir_ + "/" + name) + " (disk full, or a quota?)");
  }
}

namespace {

/// The records of metrics.jsonl that TensorBoard shows (steps and
/// evaluations); a line cut short by a kill is skipped.
std::vector<nlohmann::json> scalar_records(const fs::path& metrics) {
  std::ifstream in(metrics);
  check(in.good(), "cannot read " + metrics.string());
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    auto r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object())
      continue;
    const auto type = r.value("type", std::string());
    if (type == "step" || type == "eval")
      records.push_back(std::move(r));
  }
  check(!records.empty(), metrics.string() + " holds no step or eval record (empty, or cut short before the first): " +
                            "nothing to export");
  return records;
}

/// One run folder's tb/, from its metrics.jsonl, written beside it and put
/// in place whole (a failed export leaves the earlier tb/ as it was).
std::string export_run(const fs::path& run) {
  const auto records = scalar_records(run / "metrics.jsonl");
  const auto tb = run / "tb";
  const auto fresh = run / "tb.tmp";
  std::error_code ec;
  fs::remove_all(fresh, ec);
  // The run began when it wrote its config.toml; a run without one, now.
  double start = now_epoch();
  struct stat st {};
  if (::stat((run / "config.toml").c_str(), &st) == 0)
    start = static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
  {
    tensorboard_writer w(fresh.string(), start);
    for (const auto& r : records)
      w.add(r);
    w.flush();
  }
  fs::remove_all(tb, ec); // the folder is gradwire's own, written again whole from the same records
  fs::rename(fresh, tb, ec);
  check(!ec, "cannot put " + tb.string() + " in place: " + ec.message());
  return tb.string();
}

} // namespace

std::vector<std::string> export_tensorboard(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  check(fs::is_directory(root, ec), dir + (fs::exists(root, ec) ? ": not a folder" : ": no such folder") +
                                      " (export reads a run's or a sweep's results folder)");
  if (fs::exists(root / "metrics.jsonl"))
    return {export_run(root)};
  check(fs::exists(root / "sweep.json"),
        dir + ": neither a run folder (metrics.jsonl) nor a sweep folder (sweep.json)");
  std::vector<fs::path> points;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().rfind("point-", 0) == 0 &&
        fs::exists(e.path() / "metrics.jsonl"))
      points.push_back(e.path());
  std::sort(points.begin(), points.end());
  std::vector<std::string> out;
  for (const auto& p : points)
    out.push_back(export_run(p));
  return out;
}

} // namespace gradwire::scheduler
