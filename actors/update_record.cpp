#include "actors/update_record.hpp"
#include "actors/varint.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

namespace gradwire::actors {
namespace {

constexpr char update_magic[] = "GWREC001";

std::string header_text(const record_header& h) {
  std::ostringstream s;
  s << "shard " << h.shard << "\nbegin " << h.begin << "\nend " << h.end << "\nworkers " << h.workers << "\n";
  if (h.steps_per_push != 1)
    s << "steps_per_push " << h.steps_per_push << "\n";
  if (!h.run.empty())
    s << "run " << h.run << "\n";
  return s.str();
}

} // namespace

record_writer::record_writer(std::string path, const record_header& h, std::int64_t max_bytes)
    : file_(std::move(path), update_magic, header_text(h), max_bytes), last_step_(static_cast<std::size_t>(std::max(1, h.workers)), 0) {}

void record_writer::add(const record_entry& e) {
  if (!file_.open())
    return;
  const auto r = static_cast<std::size_t>(e.rank);
  if (r >= last_step_.size())
    last_step_.resize(r + 1, 0);
  std::string out;
  varint::put(out, static_cast<std::uint64_t>(e.rank) * 2 + (e.serve ? 1 : 0));
  varint::put(out, varint::zigzag(e.step - last_step_[r]));
  if (!e.serve)
    varint::put(out, static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.staleness)));
  if (!file_.append(out, !e.serve))
    return;
  last_step_[r] = e.step;
  ++entries_;
}

namespace {

record_header parse_header(const std::string& text, const std::string& path) {
  record_header h;
  int seen = 0;
  for_each_header_line(text, [&](const std::string& key, const std::string& value) {
    if (key == "run") {
      h.run = value;
      return;
    }
    std::int64_t v = 0;
    if (!header_integer(value, v))
      return;
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
  });
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
  std::size_t body = 0;
  const auto text = record_header_text(data, update_magic, path, "gradwire record", body);
  shard_record out;
  out.path = path;
  out.bytes = static_cast<std::int64_t>(data.size());
  out.header = parse_header(text, path);
  std::vector<std::int64_t> last(static_cast<std::size_t>(out.header.workers), 0);
  varint::reader in(data, body, path);
  while (!in.at_end()) {
    const auto start = in.pos();
    std::uint64_t who = 0, dstep = 0, stale = 0;
    record_entry e;
    if (!in.next(who) || !in.next(dstep)) {
      out.cut = true;
      break;
    }
    e.serve = (who & 1) != 0;
    check(who / 2 < static_cast<std::uint64_t>(out.header.workers),
          path + ": entry at byte " + std::to_string(start) + " names worker " + std::to_string(who / 2) + " of " +
            std::to_string(out.header.workers));
    e.rank = static_cast<int>(who / 2);
    auto& prev = last[static_cast<std::size_t>(e.rank)];
    e.step = prev + varint::unzigzag(dstep);
    check(e.step >= 0, path + ": entry at byte " + std::to_string(start) + " has a negative step");
    if (!e.serve && !in.next(stale)) {
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
