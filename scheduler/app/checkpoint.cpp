#include "scheduler/app/checkpoint.hpp"

#include "kernels/error.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace gradwire::scheduler {
namespace {

namespace fs = std::filesystem;
constexpr char part_magic[9] = "GWCKPT01";
constexpr int manifest_format = 1;
constexpr std::size_t header_bytes = 32;
constexpr std::uint64_t max_meta_bytes = std::uint64_t{64} << 20;
constexpr std::uint64_t max_float_bytes = std::uint64_t{16} << 30;

std::uint32_t crc_of(const char* p, std::size_t n, std::uint32_t crc = 0) {
  while (n > 0) { // zlib's length is a uInt
    const auto k = static_cast<uInt>(std::min<std::size_t>(n, std::size_t{1} << 30));
    crc = static_cast<std::uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(p), k));
    p += k;
    n -= k;
  }
  return crc;
}

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(const std::string& in, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + static_cast<std::size_t>(i)])) << (8 * i);
  return v;
}

/// Writes `path` atomically and durably: temporary file, fsync, rename,
/// fsync of the folder. The file is `bytes` followed by `more` bytes at `tail`.
void write_durably(const fs::path& path, const std::string& bytes, const char* tail = nullptr, std::size_t more = 0) {
  const auto tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check(fd >= 0, "cannot write " + tmp + ": " + std::strerror(errno));
  std::size_t done = 0;
  const std::size_t total = bytes.size() + more;
  while (done < total) {
    const auto w = done < bytes.size() ? ::write(fd, bytes.data() + done, bytes.size() - done)
                                       : ::write(fd, tail + (done - bytes.size()), total - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw error("cannot write " + tmp + ": " + why);
    }
    done += static_cast<std::size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    throw error("cannot sync " + tmp + ": " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw error("cannot rename " + tmp + ": " + ec.message());
  }
  const int dfd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  check(static_cast<bool>(in), "cannot read " + p.string() + (fs::exists(p) ? "" : ": no such file"));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string step_folder(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%09lld", static_cast<long long>(step));
  return buf;
}

std::string part_file(const std::string& who) {
  std::string f = "part-";
  for (char c : who)
    f.push_back(c == ' ' ? '-' : c);
  return f + ".gwc";
}

/// Complete checkpoints of a run (those with a manifest), oldest first.
std::vector<std::pair<std::int64_t, fs::path>> complete_checkpoints(const fs::path& run) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run / "checkpoints", ec)) {
    const auto name = e.path().filename().string();
    long long step = -1;
    if (name.rfind("step-", 0) == 0 && std::sscanf(name.c_str() + 5, "%lld", &step) == 1 && step >= 0 &&
        fs::exists(e.path() / "MANIFEST.json"))
      out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

std::string part_head(const actors::snapshot_frame& f) {
  const auto fbytes = f.float_count() * sizeof(float);
  std::uint32_t crc = crc_of(f.meta.data(), f.meta.size());
  if (fbytes > 0)
    crc = crc_of(reinterpret_cast<const char*>(f.floats.data()), fbytes, crc);
  std::string out(part_magic, 8);
  put_u64(out, f.meta.size());
  put_u64(out, fbytes);
  put_u64(out, crc);
  return out + f.meta;
}

std::string part_bytes(const actors::snapshot& s) {
  const auto meta = s.meta();
  const auto floats = s.packed();
  const auto fbytes = floats.size() * sizeof(float);
  std::uint32_t crc = crc_of(meta.data(), meta.size());
  crc = crc_of(reinterpret_cast<const char*>(floats.data()), fbytes, crc);
  std::string out(part_magic, 8);
  put_u64(out, meta.size());
  put_u64(out, fbytes);
  put_u64(out, crc);
  out += meta;
  out.append(reinterpret_cast<const char*>(floats.data()), fbytes);
  return out;
}

actors::snapshot part_from_bytes(const std::string& b, const std::string& where) {
  check(b.size() >= header_bytes, where + ": truncated (" + std::to_string(b.size()) + " bytes, the header alone is 32)");
  check(b.compare(0, 8, part_magic) == 0, where + ": not a gradwire checkpoint part (bad magic)");
  const auto meta_n = get_u64(b, 8), float_n = get_u64(b, 16), crc = get_u64(b, 24);
  check(meta_n <= max_meta_bytes && float_n <= max_float_bytes && float_n % sizeof(float) == 0,
        where + ": corrupt header (sizes " + std::to_string(meta_n) + " and " + std::to_string(float_n) + ")");
  check(b.size() == header_bytes + meta_n + float_n,
        where + ": " + std::to_string(b.size()) + " bytes, the header says " + std::to_string(header_bytes + meta_n + float_n) +
          " (truncated or appended to)");
  const auto got = crc_of(b.data() + header_bytes, meta_n + float_n);
  check(got == crc, where + ": checksum mismatch (the file is corrupt)");
  std::vector<float> floats(float_n / sizeof(float));
  std::memcpy(floats.data(), b.data() + header_bytes + meta_n, float_n);
  return actors::snapshot::from_parts(b.substr(header_bytes, meta_n), floats.data(), floats.size(), where);
}

nlohmann::json checkpoint_identity(const run_config& cfg, std::int64_t parameters) {
  nlohmann::json id = {{"model", cfg.model.kind},
          {"parameters", parameters},
          {"topology", cfg.topology},
          {"mode", cfg.mode},
          {"workers", cfg.single() ? 1 : cfg.workers},
          {"shards", cfg.family && cfg.family->has_shards ? cfg.ps.shards : 0},
          {"optimizer", cfg.opt.kind},
          {"momentum", cfg.opt.momentum != 0.f}};
  if (!cfg.run_id.empty())
    id["run"] = cfg.run_id;
  return id;
}

checkpoint_writer::checkpoint_writer(std::string run_dir, int keep, nlohmann::json identity)
    : dir_(std::move(run_dir)), keep_(std::max(1, keep)), identity_(std::move(identity)) {
  thread_ = std::thread([this] { loop(); });
}

checkpoint_writer::~checkpoint_writer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void checkpoint_writer::submit(std::int64_t step, std::vector<actors::snapshot_frame> parts, nlohmann::json run) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back({step, std::move(parts), std::move(run)});
  }
  cv_.notify_all();
}

void checkpoint_writer::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return queue_.empty() && !busy_; });
}

int checkpoint_writer::written() const {
  std::lock_guard<std::mutex> lk(mu_);
  return written_;
}

std::string checkpoint_writer::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

double checkpoint_writer::seconds() const {
  std::lock_guard<std::mutex> lk(mu_);
  return seconds_;
}

void checkpoint_writer::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return !queue_.empty() || closing_; });
    if (queue_.empty())
      return;
    auto j = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    std::string why;
    try {
      write(j);
    } catch (const std::exception& e) {
      why = e.what();
    }
    lk.lock();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (why.empty())
      ++written_;
    else if (error_.empty())
      error_ = why;
    busy_ = false;
    cv_.notify_all();
  }
}

void checkpoint_writer::write(const job& j) {
  const fs::path run(dir_);
  const auto folder = run / "checkpoints" / step_folder(j.step);
  fs::create_directories(folder);
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : j.parts) {
    const auto head = part_head(p);
    const auto name = part_file(p.who);
    const auto fbytes = p.float_count() * sizeof(float);
    write_durably(folder / name, head, fbytes ? reinterpret_cast<const char*>(p.floats.data()) : nullptr, fbytes);
    parts.push_back({{"who", p.who}, {"file", name}, {"bytes", head.size() + fbytes}, {"crc32", get_u64(head, 24)}});
  }
  // After a lost worker the checkpoint holds the survivors: the workers it
  // resumes with, and which ranks it lacks (a resume renumbers the others).
  auto identity = identity_;
  auto run_info = j.run;
  int workers = 0, ranks = identity.value("workers", 0);
  nlohmann::json lost = nlohmann::json::array();
  std::vector<bool> present(static_cast<std::size_t>(std::max(ranks, 0)), false);
  for (const auto& p : j.parts) {
    int r = -1;
    if (std::sscanf(p.who.c_str(), "worker %d", &r) == 1) {
      ++workers;
      if (r >= 0 && r < ranks)
        present[static_cast<std::size_t>(r)] = true;
    }
  }
  if (workers > 0 && workers < ranks) {
    for (int r = 0; r < ranks; ++r)
      if (!present[static_cast<std::size_t>(r)])
        lost.push_back(r);
    identity["workers"] = workers;
    run_info["lost_workers"] = lost;
  }
  nlohmann::json manifest = {{"format", manifest_format}, {"step", j.step}, {"byte_order", "little-endian"},
                             {"identity", identity},      {"parts", parts}, {"run", run_info}};
  write_durably(folder / "MANIFEST.json", manifest.dump(2) + "\n"); // last: now it exists
  const auto all = complete_checkpoints(run);
  for (std::size_t k = 0; k + static_cast<std::size_t>(keep_) < all.size(); ++k) {
    std::error_code ec;
    fs::remove(all[k].second / "MANIFEST.json", ec); // first: a half-removed checkpoint is no checkpoint
    fs::remove_all(all[k].second, ec);
  }
}

namespace {

/// The checkpoint folder `which` (a run folder, or a checkpoint's own) and
/// `step` (0: the newest complete) name.
fs::path chosen_checkpoint(const std::string& which, std::int64_t step) {
  fs::path folder(which);
  check(fs::is_directory(folder), which + ": no such folder (give a run's folder or one of its checkpoints)");
  if (!fs::exists(folder / "MANIFEST.json")) { // a run folder
    if (step > 0) {
      folder = folder / "checkpoints" / step_folder(step);
      check(fs::exists(folder / "MANIFEST.json"),
            which + ": no complete checkpoint of step " + std::to_string(step) + " (" + folder.string() + "/MANIFEST.json is missing)");
    } else {
      const auto all = complete_checkpoints(folder);
      check(!all.empty(), which + ": no complete checkpoint under " + (folder / "checkpoints").string() +
                            " (was train.checkpoint_every set?)");
      folder = all.back().second;
    }
  }
  return folder;
}

} // namespace

int checkpoint_workers(const std::string& which, std::int64_t step) {
  try {
    const auto m = nlohmann::json::parse(read_all((chosen_checkpoint(which, step) / "MANIFEST.json").string()));
    const auto& lost = m.at("run").value("lost_workers", nlohmann::json::array());
    return lost.empty() ? -1 : m.at("identity").at("workers").get<int>();
  } catch (const std::exception&) {
    return -1; // load_checkpoint says what is wrong, in its place
  }
}

namespace {

/// The manifest's own fields, each checked for type and range, once, so
/// that no reader meets a wrong type ("run" is read by the resumed run:
/// its clock, the workers lost before).
void check_manifest(const nlohmann::json& m, const std::string& mpath) {
  check(m.is_object() && m.contains("format") && m["format"].is_number_integer(), mpath + ": no format number");
  check(m["format"].get<int>() == manifest_format,
        mpath + ": format " + m["format"].dump() + ", this build reads " + std::to_string(manifest_format));
  check(m.contains("step") && m["step"].is_number_integer() && m["step"].get<std::int64_t>() >= 0, mpath + ": no valid step");
  check(m.contains("parts") && m["parts"].is_array() && !m["parts"].empty(), mpath + ": no parts listed");
  check(m.contains("identity") && m["identity"].is_object(), mpath + ": no identity");
  if (!m.contains("run"))
    return;
  const auto& run = m["run"];
  check(run.is_object(), mpath + ": \"run\" is " + run.dump() + ", not an object");
  for (const char* key : {"train_seconds", "eval_seconds"})
    check(!run.contains(key) || (run[key].is_number() && run[key].get<double>() >= 0),
          mpath + ": run." + key + " is " + (run.contains(key) ? run[key].dump() : "") + ", not a number of seconds");
  if (run.contains("lost_workers")) {
    const auto& lost = run["lost_workers"];
    check(lost.is_array() && std::all_of(lost.begin(), lost.end(),
                                         [](const nlohmann::json& r) {
                                           return r.is_number_integer() && r.get<std::int64_t>() >= 0;
                                         }),
          mpath + ": run.lost_workers is " + lost.dump() + ", not a list of ranks");
  }
}

/// One part the manifest lists, read from its file in `folder` and checked
/// against the entry (name, size, who, step) and the parts read so far.
void read_part(const nlohmann::json& p, const std::filesystem::path& folder, const std::string& mpath,
               resume_point& point) {
  check(p.is_object() && p.contains("file") && p["file"].is_string() && p.contains("who") && p["who"].is_string() &&
          p.contains("bytes") && p["bytes"].is_number_unsigned(),
        mpath + ": a malformed part entry");
  const auto file = p["file"].get<std::string>();
  check(file.find('/') == std::string::npos && file.find("..") == std::string::npos, mpath + ": part file '" + file + "' outside its folder");
  const auto path = (folder / file).string();
  const auto bytes = read_all(path);
  check(bytes.size() == p["bytes"].get<std::uint64_t>(), path + ": " + std::to_string(bytes.size()) + " bytes, the manifest says " +
                                                            p["bytes"].dump() + " (truncated?)");
  auto s = part_from_bytes(bytes, path);
  check(s.who == p["who"].get<std::string>(), path + ": holds '" + s.who + "', the manifest says '" + p["who"].get<std::string>() + "'");
  check(s.step == point.step || s.who.rfind("shard ", 0) == 0,
        path + ": of step " + std::to_string(s.step) + " in the checkpoint of step " + std::to_string(point.step));
  check(!point.parts.count(s.who), mpath + ": '" + s.who + "' twice");
  const auto who = s.who; // the right side of = is evaluated first (C++17): not s.who after the move
  point.parts[who] = std::make_shared<actors::snapshot>(std::move(s));
}

/// Saved after a lost worker: the survivors' parts become workers 0 .. k-1
/// in rank order (the run resumes with k workers).
void renumber_survivors(resume_point& point) {
  std::map<int, std::shared_ptr<const actors::snapshot>> workers;
  for (auto it = point.parts.begin(); it != point.parts.end();) {
    int r = -1;
    if (std::sscanf(it->first.c_str(), "worker %d", &r) == 1) {
      workers[r] = it->second;
      it = point.parts.erase(it);
    } else
      ++it;
  }
  int i = 0;
  for (const auto& [r, part] : workers)
    point.parts["worker " + std::to_string(i++)] = part;
}

} // namespace

loaded_checkpoint load_checkpoint(const std::string& which, std::int64_t step) {
  const auto folder = chosen_checkpoint(which, step);
  loaded_checkpoint out;
  out.dir = folder.string();
  const auto mpath = (folder / "MANIFEST.json").string();
  try {
    out.manifest = nlohmann::json::parse(read_all(mpath));
  } catch (const nlohmann::json::exception& e) {
    throw error(mpath + ": not valid JSON (" + e.what() + ")");
  }
  const auto& m = out.manifest;
  check_manifest(m, mpath);
  out.point = std::make_shared<resume_point>();
  out.point->step = m["step"].get<std::int64_t>();
  for (const auto& p : m["parts"])
    read_part(p, folder, mpath, *out.point);
  if (m.contains("run") && !m["run"].value("lost_workers", nlohmann::json::array()).empty()) // typed above
    renumber_survivors(*out.point);
  return out;
}

void check_identity(const loaded_checkpoint& c, const nlohmann::json& identity) {
  const auto& have = c.manifest["identity"];
  if (identity.contains("run")) { // first: of another run, nothing else about it matters
    const auto got = have.value("run", nlohmann::json(nullptr));
    check(got == identity["run"],
          c.dir + "/MANIFEST.json: the checkpoint is " +
            (got.is_string() ? "of run " + got.get<std::string>() : std::string("of no named run")) +
            ", and this folder's run is " + identity["run"].get<std::string>() +
            " (config.toml experiment.run_id): a run resumes only from its own checkpoints");
  }
  for (auto it = identity.begin(); it != identity.end(); ++it) {
    const auto got = have.contains(it.key()) ? have[it.key()] : nlohmann::json(nullptr);
    check(got == it.value(), c.dir + "/MANIFEST.json: the checkpoint is of " + it.key() + " = " + got.dump() +
                               ", this run has " + it.value().dump() + " (resume with the config it was saved with)");
  }
}

} // namespace gradwire::scheduler
