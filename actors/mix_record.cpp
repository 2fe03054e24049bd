#include "actors/mix_record.hpp"
#include "actors/varint.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

namespace gradwire::actors {
namespace {

constexpr char mix_magic[] = "GWMIX001";

const char* kind_name(mix_kind k) {
  constexpr const char* names[mix_kinds] = {"read", "send", "average", "average and apply", "apply", "close"};
  return names[static_cast<int>(k)];
}

mix_header parse_mix_header(const std::string& text, const std::string& path) {
  mix_header h;
  int seen = 0;
  for_each_header_line(text, [&](const std::string& key, const std::string& value) {
    std::int64_t v = 0;
    if (key == "run")
      h.run = value;
    else if (key == "worker" && header_integer(value, v))
      h.worker = static_cast<int>(std::clamp<std::int64_t>(v, -1, 1 << 20)), seen |= 1;
    else if (key == "workers" && header_integer(value, v))
      h.workers = static_cast<int>(std::clamp<std::int64_t>(v, 0, 1 << 21)), seen |= 2;
  });
  check(seen == 3 && h.workers >= 1 && h.workers <= (1 << 20) && h.worker >= 0 && h.worker < h.workers,
        path + ": malformed mixer record header (worker and workers expected)");
  return h;
}

} // namespace

std::string describe(const mix_event& e) {
  return "worker " + std::to_string(e.rank) + "'s " + kind_name(e.kind) + (e.kind == mix_kind::mix ? " at its step " : " at step ") +
         std::to_string(e.step);
}

mix_record_writer::mix_record_writer(std::string path, const mix_header& h, std::int64_t max_bytes)
    : file_(std::move(path), mix_magic,
            "worker " + std::to_string(h.worker) + "\nworkers " + std::to_string(h.workers) + "\n" +
              (h.run.empty() ? std::string() : "run " + h.run + "\n"),
            max_bytes),
      last_step_(static_cast<std::size_t>(std::max(1, h.workers)), 0) {}

void mix_record_writer::add(const mix_event& e) {
  if (!file_.open() || e.rank < 0 || static_cast<std::size_t>(e.rank) >= last_step_.size())
    return;
  auto& last = last_step_[static_cast<std::size_t>(e.rank)];
  std::string out;
  varint::put(out, static_cast<std::uint64_t>(e.rank) * 8 + static_cast<std::uint64_t>(e.kind));
  varint::put(out, varint::zigzag(e.step - last));
  if (!file_.append(out, e.applies() || e.kind == mix_kind::close))
    return;
  last = e.step;
  ++events_;
}

std::int64_t mix_record::steps() const {
  const auto own = [this](const mix_event& e) { return e.applies() && e.rank == header.worker; };
  return static_cast<std::int64_t>(std::count_if(events.begin(), events.end(), own));
}

mix_record read_mix_record(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path + ": cannot read the mixer record");
  return mix_record_from_bytes(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), path);
}

mix_record mix_record_from_bytes(const std::string& data, const std::string& path) {
  std::size_t body = 0;
  const auto text = record_header_text(data, mix_magic, path, "gradwire mixer record", body);
  mix_record out;
  out.path = path;
  out.bytes = static_cast<std::int64_t>(data.size());
  out.header = parse_mix_header(text, path);
  std::vector<std::int64_t> last(static_cast<std::size_t>(out.header.workers), 0);
  varint::reader in(data, body, path);
  while (!in.at_end()) {
    const auto start = in.pos();
    std::uint64_t who = 0, dstep = 0;
    if (!in.next(who) || !in.next(dstep)) {
      out.cut = true;
      break;
    }
    const auto at = path + ": event at byte " + std::to_string(start);
    check(who / 8 < static_cast<std::uint64_t>(out.header.workers),
          at + " names worker " + std::to_string(who / 8) + " of " + std::to_string(out.header.workers));
    check(who % 8 < static_cast<std::uint64_t>(mix_kinds), at + " is of no known kind (" + std::to_string(who % 8) + ")");
    mix_event e{static_cast<mix_kind>(who % 8), static_cast<int>(who / 8), 0};
    auto& prev = last[static_cast<std::size_t>(e.rank)];
    e.step = prev + varint::unzigzag(dstep);
    check(e.step >= 0, at + " has a negative step");
    prev = e.step;
    out.events.push_back(e);
  }
  return out;
}

namespace {

/// The own event due after `prev` (null: the record's first).
bool follows(const mix_event* prev, const mix_event& e) {
  if (e.kind == mix_kind::mix)
    return false;
  if (!prev)
    return e.kind == mix_kind::read ? e.step == 0 : e.kind == mix_kind::close;
  if (prev->kind == mix_kind::close)
    return false;
  if (prev->applies())
    return (e.kind == mix_kind::read || e.kind == mix_kind::close) && e.step == prev->step + 1;
  const auto next = prev->kind == mix_kind::read ? mix_kind::send : mix_kind::apply_mixed;
  return e.step == prev->step && (e.kind == next || (next == mix_kind::apply_mixed && e.kind == mix_kind::apply_alone));
}

} // namespace

void check_replayable(const mix_record& r) {
  check(!r.cut && r.closed(), r.path + ": the record ends before worker " + std::to_string(r.header.worker) +
                                " finished (a killed run): an AD-PSGD replay follows whole runs");
  const mix_event* prev = nullptr;
  for (const auto& e : r.events) {
    if (e.rank != r.header.worker) {
      check(e.kind == mix_kind::mix, r.path + ": " + describe(e) + " in worker " + std::to_string(r.header.worker) +
                                       "'s record (only neighbours' averages come from other workers)");
      continue;
    }
    check(follows(prev, e), r.path + ": " + describe(e) + " where " +
                              (prev ? "the event after " + describe(*prev) : std::string("step 0's read")) +
                              " was due (the worker's own events follow its steps)");
    prev = &e;
  }
}

void check_pairings(const std::vector<const mix_record*>& by_rank) {
  std::map<std::pair<int, std::int64_t>, int> averaged; // (worker, step) -> stores that averaged with it
  std::set<std::pair<int, std::int64_t>> sent;
  for (const auto* r : by_rank)
    for (const auto& e : r->events)
      if (e.kind == mix_kind::mix)
        ++averaged[{e.rank, e.step}];
      else if (e.kind == mix_kind::send)
        sent.insert({e.rank, e.step});
  for (const auto* r : by_rank)
    for (const auto& e : r->events)
      if (e.kind == mix_kind::apply_mixed) {
        const auto it = averaged.find({e.rank, e.step});
        check(it != averaged.end(), r->path + ": " + describe(e) +
                                      ", but no neighbour's record averages with that step (the records are not of one run)");
      }
  for (const auto& [at, n] : averaged)
    check(n == 1 && sent.count(at), "worker " + std::to_string(at.first) + "'s step " + std::to_string(at.second) +
                                      ": averaged with by " + std::to_string(n) + " neighbour(s), and " +
                                      (sent.count(at) ? "sent" : "not sent") +
                                      " in its own record (the records are not of one run)");
}

} // namespace gradwire::actors
