/// @file shard_snapshot.cpp
/// A parameter-server shard's part of a checkpoint: what take_snapshot
/// writes and restore reads back (checked against this shard's range and
/// worker count).
#include "actors/ps_shard_state.hpp"

#include "kernels/error.hpp"

#include <cstring>

namespace gradwire::actors::shard_detail {

snapshot take_snapshot(const shard_state& s) {
  snapshot out;
  out.who = "shard " + std::to_string(s.cfg.id);
  out.step = s.version;
  out.put("params", s.params.to_vector());
  auto saved = s.opt->save();
  out.put("moments", std::move(saved.moments));
  out.put("optimizer_steps", saved.steps);
  out.put("range", std::vector<std::int64_t>{static_cast<std::int64_t>(s.cfg.begin), static_cast<std::int64_t>(s.cfg.end)});
  out.put("clocks", s.clocks);
  out.put("dropped", s.dropped);
  std::vector<std::int64_t> live;
  for (bool l : s.live)
    live.push_back(l ? 1 : 0);
  out.put("live", live); // after a lost worker: whose clocks a resume at the survivors' count keeps
  out.put("staleness", s.staleness);
  out.put("max_gap", s.max_gap);
  s.rule->save(out);
  return out;
}

void restore(shard_state& s, const snapshot& in) {
  const auto& range = in.i("range");
  check(range.size() == 2 && range[0] == static_cast<std::int64_t>(s.cfg.begin) &&
          range[1] == static_cast<std::int64_t>(s.cfg.end),
        in.who + ": the checkpoint's shard covers another range of the parameters (another topology.ps.shards?)");
  const auto& p = in.f("params");
  check(p.size() == len(s), in.who + ": " + std::to_string(p.size()) + " parameters for a slice of " + std::to_string(len(s)));
  std::memcpy(s.params.data(), p.data(), len(s) * sizeof(float));
  s.opt->load({in.one("optimizer_steps"), in.f("moments")});
  auto clocks = in.i("clocks");
  auto dropped = in.i("dropped");
  if (in.has("live") && clocks.size() != s.clocks.size()) { // saved after a loss: the survivors', renumbered
    const auto& live = in.i("live");
    check(live.size() == clocks.size() && dropped.size() == clocks.size(), in.who + ": malformed live flags");
    std::vector<std::int64_t> c, d;
    for (std::size_t r = 0; r < live.size(); ++r)
      if (live[r] != 0) {
        c.push_back(clocks[r]);
        d.push_back(dropped[r]);
      }
    clocks = std::move(c);
    dropped = std::move(d);
  }
  check(clocks.size() == s.clocks.size() && dropped.size() == s.dropped.size(),
        in.who + ": clocks of " + std::to_string(clocks.size()) + " workers for " + std::to_string(s.clocks.size()));
  s.clocks = clocks;
  s.dropped = dropped;
  s.staleness = in.i("staleness");
  for (auto c : s.staleness)
    check(c >= 0, in.who + ": a negative staleness count");
  s.max_gap = in.one("max_gap");
  s.version = in.has("shard_version") ? in.one("shard_version") : in.step;
  check(s.version >= 0, in.who + ": negative version");
  s.rule->restore(in);
}

} // namespace gradwire::actors::shard_detail
