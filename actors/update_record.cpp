#include "actors/update_record.hpp"

#include "kernels/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

namespace gradwire::actors {
namespace {

constexpr char magic[] = "GWREC001";
constexpr std::size_t magic_len = 8;
constexpr std::size_t block_bytes = 4096;

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
std::int64_t unzigzag(std::uint64_t v) { return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1); }

std::string header_text(const record_header& h) {
  std::ostringstream s;
  s << "shard " << h.shard << "\nbegin " << h.begin << "\nend " << h.end << "\nworkers " << h.workers << "\n";
  if (h.steps_per_push != 1)
    s << "steps_per_push " << h.steps_per_push << "\n";
  return s.str();
}

} // namespace

record_writer::record_writer(std::string path, const record_header& h, std::int64_t max_bytes)
    : path_(std::move(path)), last_step_(static_cast<std::size_t>(std::max(1, h.workers)), 0), max_bytes_(max_bytes) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    error_ = path_ + ": " + std::strerror(errno);
    return;
  }
  const auto text = header_text(h);
  buf_.append(magic, magic_len);
  const auto n = static_cast<std::uint32_t>(text.size());
  for (int i = 0; i < 4; ++i)
    buf_.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  buf_ += text;
  flush();
}

record_writer::~record_writer() {
  flush();
  if (fd_ >= 0)
    ::close(fd_);
}

void record_writer::fail(const std::string& why) {
  if (error_.empty())
    error_ = path_ + ": " + why;
  buf_.clear();
}

void record_writer::add(const record_entry& e) {
  if (fd_ < 0 || capped_ || !error_.empty())
    return;
  const auto r = static_cast<std::size_t>(e.rank);
  if (r >= last_step_.size())
    last_step_.resize(r + 1, 0);
  const auto at = buf_.size();
  put_varint(buf_, static_cast<std::uint64_t>(e.rank) * 2 + (e.serve ? 1 : 0));
  put_varint(buf_, zigzag(e.step - last_step_[r]));
  if (!e.serve)
    put_varint(buf_, static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.staleness)));
  if (max_bytes_ > 0 && bytes_ + static_cast<std::int64_t>(buf_.size()) > max_bytes_) {
    buf_.resize(at); // the bound: the record ends at its last whole entry
    capped_ = true;
    flush();
    return;
  }
  last_step_[r] = e.step;
  ++entries_;
  if (!e.serve || buf_.size() >= block_bytes)
    flush();
}

void record_writer::flush() {
  if (fd_ < 0 || buf_.empty() || !error_.empty())
    return;
  std::size_t done = 0;
  while (done < buf_.size()) {
    const auto n = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      fail(n < 0 ? std::strerror(errno) : "the disk took no bytes");
      return;
    }
    done += static_cast<std::size_t>(n);
  }
  bytes_ += static_cast<std::int64_t>(buf_.size());
  buf_.clear();
}

namespace {

/// Reads entries from `data` after the header.
class entry_reader {
public:
  entry_reader(const std::string& data, std::size_t pos, const std::string& path) : d_(data), pos_(pos), path_(path) {}
  bool at_end() const { return pos_ >= d_.size(); }
  std::size_t pos() const { return pos_; }
  /// The next varint; false when the data ends inside it.
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= d_.size())
        return false;
      const auto b = static_cast<unsigned char>(d_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0)
        return true;
    }
    throw error(path_ + ": malformed record (a number of more than 64 bits at byte " + std::to_string(pos_) + ")");
  }

private:
  const std::string& d_;
  std::size_t pos_;
  const std::string& path_;
};

record_header parse_header(const std::string& text, const std::string& path) {
  record_header h;
  std::istringstream in(text);
  std::string key;
  std::int64_t v = 0;
  int seen = 0;
  while (in >> key >> v) {
    if (key == "shard")
      h.shard = static_cast<int>(v), seen |= 1;
    else if (key == "begin")
      h.begin = v, seen |= 2;
    else if (key == "end")
      h.end = v, seen |= 4;
    else if (key == "workers")
      h.workers = static_cast<int>(v), seen |= 8;
    else if (key == "steps_per_push")
      h.steps_per_push = static_cast<int>(std::clamp<std::int64_t>(v, 0, 1 << 20));
  }
  check(seen == 15 && h.workers >= 1 && h.workers <= (1 << 20) && h.begin >= 0 && h.end > h.begin && h.shard >= 0,
        path + ": malformed record header (shard, begin, end and workers expected)");
  check(h.steps_per_push >= 1, path + ": malformed record header (steps_per_push must be 1 or more)");
  return h;
}

} // namespace

shard_record read_record(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path + ": cannot read the record");
  return record_from_bytes(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), path);
}

shard_record record_from_bytes(const std::string& data, const std::string& path) {
  check(data.size() >= magic_len + 4 && data.compare(0, magic_len, magic) == 0,
        path + ": not a gradwire record (no GWREC001 header)");
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i)
    n |= static_cast<std::uint32_t>(static_cast<unsigned char>(data[magic_len + static_cast<std::size_t>(i)])) << (8 * i);
  check(n <= 4096 && magic_len + 4 + n <= data.size(), path + ": malformed record header (length " + std::to_string(n) + ")");
  shard_record out;
  out.path = path;
  out.bytes = static_cast<std::int64_t>(data.size());
  out.header = parse_header(data.substr(magic_len + 4, n), path);
  std::vector<std::int64_t> last(static_cast<std::size_t>(out.header.workers), 0);
  entry_reader in(data, magic_len + 4 + n, path);
  while (!in.at_end()) {
    const auto start = in.pos();
    std::uint64_t who = 0, dstep = 0, stale = 0;
    record_entry e;
    if (!in.varint(who) || !in.varint(dstep)) {
      out.cut = true;
      break;
    }
    e.serve = (who & 1) != 0;
    check(who / 2 < static_cast<std::uint64_t>(out.header.workers),
          path + ": entry at byte " + std::to_string(start) + " names worker " + std::to_string(who / 2) + " of " +
            std::to_string(out.header.workers));
    e.rank = static_cast<int>(who / 2);
    auto& prev = last[static_cast<std::size_t>(e.rank)];
    e.step = prev + unzigzag(dstep);
    check(e.step >= 0, path + ": entry at byte " + std::to_string(start) + " has a negative step");
    if (!e.serve && !in.varint(stale)) {
      out.cut = true;
      break;
    }
    check(stale < (std::uint64_t{1} << 62), path + ": entry at byte " + std::to_string(start) + " has an impossible staleness");
    e.staleness = static_cast<std::int64_t>(stale);
    prev = e.step;
    out.entries.push_back(e);
  }
  return out;
}

namespace {

/// The steps each worker completes in `r`'s entries: each a pull answered,
/// then its push applied (the pull of step k, the push of step k, k from
/// 0; with H steps per push, the push of a step from k to k + H - 1).
std::vector<std::int64_t> complete_steps(const shard_record& r, int workers) {
  std::vector<std::int64_t> done(static_cast<std::size_t>(workers), 0);
  std::vector<char> pulled(static_cast<std::size_t>(workers), 0);
  const std::int64_t per = r.header.steps_per_push;
  for (const auto& e : r.entries) {
    const auto w = static_cast<std::size_t>(e.rank);
    check(e.rank >= 0 && w < done.size(), r.path + ": an entry of worker " + std::to_string(e.rank) + " of " +
                                            std::to_string(workers));
    const bool in_turn = e.serve ? e.step == done[w] : e.step >= done[w] && e.step < done[w] + per;
    if (in_turn && e.serve != (pulled[w] != 0)) {
      pulled[w] = e.serve ? 1 : 0;
      done[w] = e.serve ? done[w] : e.step + 1;
      continue;
    }
    throw error(r.path + ": worker " + std::to_string(e.rank) + "'s " + (e.serve ? "pull" : "push") + " of step " +
                std::to_string(e.step) + " where its " + (pulled[w] ? "push" : "pull") + " of step " +
                std::to_string(done[w]) + " was due (a record must start with the run, and its entries follow each "
                                          "worker's steps)");
  }
  return done;
}

/// `r` without what the replay cannot reach: from the first push of a step
/// beyond its worker's `steps` on, and pulls for such steps.
bool cut_to(shard_record& r, const std::vector<std::int64_t>& steps) {
  std::vector<record_entry> kept;
  for (const auto& e : r.entries) {
    if (e.step < steps[static_cast<std::size_t>(e.rank)]) {
      kept.push_back(e);
      continue;
    }
    if (!e.serve)
      break; // this update cannot happen, nor any after it
  }
  const bool changed = kept.size() != r.entries.size();
  r.entries = std::move(kept);
  return changed;
}

} // namespace

replay_cut consistent_cut(std::vector<shard_record> records, int workers) {
  check(!records.empty(), "replay: no shard records");
  std::int64_t total = 0, applies = 0;
  const auto count_applies = [](const shard_record& r) {
    return static_cast<std::int64_t>(
      std::count_if(r.entries.begin(), r.entries.end(), [](const record_entry& e) { return !e.serve; }));
  };
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& h = records[i].header;
    check(h.workers == workers, records[i].path + ": a record of " + std::to_string(h.workers) + " workers, for a run of " +
                                  std::to_string(workers));
    check(h.shard == static_cast<int>(i), records[i].path + ": the record of shard " + std::to_string(h.shard) +
                                            " where shard " + std::to_string(i) + "'s was expected");
    total += static_cast<std::int64_t>(records[i].entries.size());
    applies += count_applies(records[i]);
  }
  replay_cut out;
  out.steps.assign(static_cast<std::size_t>(workers), std::numeric_limits<std::int64_t>::max());
  for (bool changed = true; changed;) {
    for (const auto& r : records) {
      const auto done = complete_steps(r, workers);
      for (std::size_t w = 0; w < done.size(); ++w)
        out.steps[w] = std::min(out.steps[w], done[w]);
    }
    changed = false;
    for (auto& r : records)
      changed = cut_to(r, out.steps) || changed;
  }
  for (const auto& r : records) {
    total -= static_cast<std::int64_t>(r.entries.size());
    applies -= count_applies(r);
  }
  out.entries_left_out = total;
  out.updates_left_out = applies;
  out.shards = std::move(records);
  return out;
}

} // namespace gradwire::actors
