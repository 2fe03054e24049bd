#include "scheduler/app/results.hpp"

#include "scheduler/app/tensorboard.hpp"
#include "scheduler/app/version.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace gradwire::scheduler {

results_writer::results_writer(std::string dir, bool append) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  check(!ec, "cannot create results folder " + dir_ + ": " + ec.message());
  path_ = (std::filesystem::path(dir_) / "metrics.jsonl").string();
  reserve_ = (std::filesystem::path(dir_) / "summary.reserve.tmp").string();
  if (const int r = ::open(reserve_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); r >= 0) {
    if (::posix_fallocate(r, 0, reserve_bytes) != 0)
      (void)::ftruncate(r, 0); // no room now: nothing held back
    ::close(r);
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | (append ? 0 : O_TRUNC) | O_CLOEXEC, 0644);
  check(fd_ >= 0, "cannot write " + path_ + ": " + std::strerror(errno));
  if (append) { // after the last whole line (an interrupted run may have left a partial one)
    std::ifstream in(path_, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto end = text.rfind('\n');
    committed_ = end == std::string::npos ? 0 : end + 1;
    check(::ftruncate(fd_, static_cast<off_t>(committed_)) == 0 && ::lseek(fd_, static_cast<off_t>(committed_), SEEK_SET) >= 0,
          "cannot append to " + path_ + ": " + std::strerror(errno));
  }
}

std::int64_t results_writer::cut_after(std::int64_t step) {
  flush();
  std::lock_guard<std::mutex> lk(mu_);
  std::ifstream in(path_, std::ios::binary);
  std::string kept;
  std::int64_t dropped = 0;
  bool past = false;
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line, nullptr, false);
    const auto s = r.is_object() ? r.find("step") : r.end();
    const bool stepped = r.is_object() && s != r.end() && s->is_number_integer();
    past = past || (stepped && s->get<std::int64_t>() > step);
    if (past && !(stepped && s->get<std::int64_t>() <= step)) {
      ++dropped;
      continue;
    }
    kept += line + '\n';
  }
  in.close();
  if (dropped == 0)
    return 0;
  // The kept records beside the file, then in its place: a kill on the way
  // leaves the old file or the new one, never half of one.
  const auto tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kept;
    out.flush();
    check(out.good(), "cannot write " + tmp + ": " + std::strerror(errno));
  }
  check(std::rename(tmp.c_str(), path_.c_str()) == 0, "cannot replace " + path_ + ": " + std::strerror(errno));
  ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  check(fd_ >= 0, "cannot append to " + path_ + ": " + std::strerror(errno));
  committed_ = kept.size();
  return dropped;
}

results_writer::~results_writer() {
  try {
    flush();
  } catch (...) {
  }
  if (fd_ >= 0)
    ::close(fd_);
  ::unlink(reserve_.c_str());
}

std::string results_writer::failure() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

void results_writer::add_tensorboard(const nlohmann::json& record) {
  try {
    tb_->add(record);
  } catch (const std::exception& e) { // tb/ cannot be written: the run and metrics.jsonl go on without it
    log::warn("TensorBoard files are no longer written: {}", e.what());
    tb_.reset();
  }
}

void results_writer::flush_tensorboard() {
  try {
    tb_->flush();
  } catch (const std::exception& e) {
    log::warn("TensorBoard files are no longer written: {}", e.what());
    tb_.reset();
  }
}

void results_writer::tensorboard(double time_offset) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lk(mu_);
  tb_ = std::make_unique<tensorboard_writer>(dir_ + "/tb", now - time_offset);
}

void results_writer::flush() {
  std::lock_guard<std::mutex> lk(mu_);
  unflushed_ = 0;
  last_flush_ = std::chrono::steady_clock::now();
  if (tb_)
    flush_tensorboard();
  if (pending_.empty() || !failure_.empty())
    return;
  std::size_t done = 0;
  while (done < pending_.size()) {
    const auto n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) { // a full disk, a quota, a size limit: keep the whole lines, and stop
      const int e = n < 0 ? errno : ENOSPC;
      const auto last_line = done == 0 ? std::string::npos : pending_.rfind('\n', done - 1); // of what got out
      const auto keep = committed_ + (last_line == std::string::npos ? 0 : last_line + 1);
      const bool cut = ::ftruncate(fd_, static_cast<off_t>(keep)) == 0;
      failure_ = "writing " + path_ + ": " + std::strerror(e) + "; it keeps the records written before, " +
                 (cut ? std::string("up to its last whole line") : "but may end in a partial line");
      pending_.clear();
      failed_ = true;
      log::error("{}. Stopping the run.", failure_);
      if (stop_)
        stop_->store(true);
      return;
    }
    done += static_cast<std::size_t>(n);
  }
  committed_ += pending_.size();
  pending_.clear();
}

namespace {

bool temporary(const std::string& name) { return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0; }

/// What gradwire writes into a run's or a sweep's folder.
bool ours(const std::filesystem::path& p) {
  const auto name = p.filename().string();
  static const char* const files[] = {"summary.json", "metrics.jsonl", "metrics.csv", "model.safetensors", "config.toml",
                                      "trace.json",   "report.html",   "plots",       "sweep.md",          "sweep.csv",
                                      "sweep.json",   "record",        "tb",          "checkpoints"};
  for (const char* f : files)
    if (name == f)
      return true;
  return name.rfind("trace-rank", 0) == 0 || name.rfind("point-", 0) == 0 || temporary(name);
}

/// What a comparison writes into its folder.
bool a_comparisons(const std::filesystem::path& p) {
  const auto name = p.filename().string();
  return name == "report.html" || name == "plots" || name == "compare.json" || temporary(name);
}

/// `/` and the home folder hold a user's whole tree: no run is written
/// there, and --force never clears one.
void check_not_a_root(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto here = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  const char* home = std::getenv("HOME");
  std::error_code ec_home;
  const bool is_home = home != nullptr && *home != '\0' && !ec && here == fs::weakly_canonical(home, ec_home) && !ec_home;
  check(ec || (here != here.root_path() && !is_home),
        "results folder " + dir + " is " + (is_home ? std::string("the home folder") : std::string("the file system's root")) +
          ": a run writes into a folder of its own; give one with --out DIR (e.g. --out results/NAME)");
}

/// The entries of `dir` that `mine` says gradwire wrote, and the others.
void split_entries(const std::string& dir, bool (*mine)(const std::filesystem::path&),
                   std::vector<std::filesystem::path>& foreign, std::vector<std::filesystem::path>& earlier) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    (mine(e.path()) ? earlier : foreign).push_back(e.path());
  check(!ec, "cannot read folder " + dir + ": " + ec.message());
}

/// --force: the earlier run's (or comparison's) files, and only those.
void remove_earlier(const std::vector<std::filesystem::path>& earlier) {
  std::error_code ec;
  for (const auto& p : earlier) {
    std::filesystem::remove_all(p, ec);
    check(!ec, "--force: cannot remove " + p.string() + ": " + ec.message());
  }
}

std::string status_of(const std::string& dir) {
  if (std::ifstream in(std::filesystem::path(dir) / "summary.json"); in) {
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("status") && j["status"].is_string())
      return " (" + j["status"].get<std::string>() + ")";
  }
  return "";
}

} // namespace

void claim_results_folder(const std::string& dir, bool force, const std::string& what) {
  namespace fs = std::filesystem;
  check_not_a_root(dir);
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return;
  check(fs::is_directory(dir, ec), "results folder " + dir + " exists and is not a folder: choose another with --out DIR");
  std::vector<fs::path> foreign, earlier;
  split_entries(dir, ours, foreign, earlier);
  if (!foreign.empty()) // a folder of the user's: nothing in it is ours to replace, or to mix with
    throw error("results folder " + dir + " holds files that gradwire did not write ('" +
                foreign.front().filename().string() + "'" +
                (foreign.size() > 1 ? " and " + std::to_string(foreign.size() - 1) + " more" : std::string()) +
                "): a " + what + " writes only into a new or empty folder, or replaces (--force) an earlier run's. " +
                "Give it another folder with --out DIR");
  if (earlier.empty())
    return;
  if (!force)
    throw error("results folder " + dir + " already holds a " +
                (fs::exists(fs::path(dir) / "sweep.json") ? std::string("sweep") : std::string("run")) + status_of(dir) +
                ": nothing is overwritten. Give this " + what + " another folder with --out DIR, or replace that one " +
                "with --force");
  remove_earlier(earlier); // the whole earlier run, its checkpoints and record included
}

namespace {

bool holds_results(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* f : {"summary.json", "metrics.jsonl", "sweep.json"})
    if (std::filesystem::exists(dir / f, ec))
      return true;
  return false;
}

} // namespace

void claim_compare_folder(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  check_not_a_root(dir);
  const auto here = fs::absolute(dir).lexically_normal();
  const auto parent = (here.has_filename() ? here : here.parent_path()).parent_path();
  check(!holds_results(here) && !holds_results(parent),
        "compare --out " + dir + ": that is " + (holds_results(here) ? "" : "inside ") +
          "a run's or a sweep's results folder; a comparison writes a folder of its own (e.g. --out results/compare-NAME)");
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return;
  check(fs::is_directory(dir, ec), "compare --out " + dir + " exists and is not a folder");
  std::vector<fs::path> mine, foreign;
  split_entries(dir, a_comparisons, foreign, mine);
  check(foreign.empty(), "compare --out " + dir + " holds files that are not a comparison's ('" +
                           (foreign.empty() ? std::string() : foreign.front().filename().string()) +
                           "'): give the comparison a folder of its own with --out DIR");
  if (mine.empty())
    return;
  check(force, "compare --out " + dir + " already holds a comparison (report.html): nothing is replaced. " +
                 "Give this one another folder with --out DIR, or replace that one with --force");
  remove_earlier(mine);
}

void results_writer::metric(const nlohmann::json& record) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!failure_.empty())
      return;
    pending_ += record.dump();
    pending_ += '\n';
    if (tb_)
      add_tensorboard(record);
    // Whole lines reach the file every 64 records or half a second, whichever
    // comes first: readers that follow the file (the Python module's
    // on_metrics, TensorBoard) see a slow run's records soon.
    if (++unflushed_ < 64 && std::chrono::steady_clock::now() - last_flush_ < std::chrono::milliseconds(500))
      return;
  }
  flush();
}

void results_writer::write_file(const std::string& name, const std::string& text) const {
  const auto path = std::filesystem::path(dir_) / name;
  const auto tmp = std::filesystem::path(dir_) / (name + ".tmp");
  std::string why;
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out.good())
      why = std::strerror(errno);
    else {
      out << text;
      out.flush();
      if (!out.good())
        why = std::strerror(errno);
    }
  }
  if (why.empty()) {
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (!ec)
      return;
    why = ec.message();
  }
  std::error_code ignored;
  std::filesystem::remove(tmp, ignored); // no partial temporaries left behind
  throw error("cannot write " + path.string() + ": " + why);
}

void results_writer::write_summary(const nlohmann::json& summary) const {
  auto stamped = summary;
  stamped["gradwire"] = {{"version", version()}, {"commit", git_commit()}}; // which build made it
  if (!run_id_.empty())
    stamped["run_id"] = run_id_;
  // summary.json first, into the room held back for it: it is small and
  // says how the run ended, so on a full disk it is the file that still
  // fits; the CSV only repeats metrics.jsonl.
  ::unlink(reserve_.c_str());
  write_file("summary.json", stamped.dump(2) + "\n");
  try {
    write_metrics_csv();
  } catch (const error& e) {
    log::warn("{} (metrics.jsonl holds the same records)", e.what());
  }
}

void results_writer::write_metrics_csv() const {
  // Every record of metrics.jsonl as a row; the columns are the scalar
  // fields in the order they first appear (records of another type leave
  // a column empty). Nested values (a worker's staleness summary) stay in
  // the JSONL.
  std::ifstream in(path_);
  std::vector<nlohmann::json> records;
  std::vector<std::string> cols;
  for (std::string line; std::getline(in, line);) {
    if (line.empty())
      continue;
    auto r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object())
      continue;
    for (const auto& [k, v] : r.items())
      if (v.is_primitive() && std::find(cols.begin(), cols.end(), k) == cols.end())
        cols.push_back(k);
    records.push_back(std::move(r));
  }
  // The record's kind and where it is in the run first, then the rest by name.
  static const char* const first[] = {"type", "time", "worker", "epoch", "step", "samples", "loss"};
  std::stable_sort(cols.begin(), cols.end(), [](const std::string& a, const std::string& b) {
    auto rank = [](const std::string& c) {
      return std::find(std::begin(first), std::end(first), c) - std::begin(first);
    };
    return rank(a) < rank(b);
  });
  auto cell = [](const nlohmann::json& v) -> std::string {
    if (v.is_null())
      return "";
    if (v.is_string()) { // quoted, quotes doubled (RFC 4180)
      std::string s = "\"";
      for (char c : v.get<std::string>())
        s += c == '"' ? std::string("\"\"") : std::string(1, c);
      return s + "\"";
    }
    return v.dump();
  };
  std::string out;
  for (std::size_t i = 0; i < cols.size(); ++i)
    out += (i ? "," : "") + cols[i];
  out += "\n";
  for (const auto& r : records) {
    for (std::size_t i = 0; i < cols.size(); ++i) {
      const auto it = r.find(cols[i]);
      out += (i ? "," : "") + (it == r.end() || !it->is_primitive() ? std::string() : cell(*it));
    }
    out += "\n";
  }
  write_file("metrics.csv", out);
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
