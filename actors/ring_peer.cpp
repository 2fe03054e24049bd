#include "actors/checked_behavior.hpp"
#include "actors/refuse.hpp"
#include "actors/reduce_protocol.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/ring_peer.hpp"

#include "actors/ring_allreduce.hpp"
#include "kernels/cpu/denormals.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

namespace gradwire::actors {
namespace {

struct peer_state {
  ring_peer_config cfg;
  caf::actor worker;
  std::unique_ptr<ring_allreduce> group;   ///< the flat ring, or the ring within the group
  std::unique_ptr<ring_allreduce> leaders; ///< hierarchical leaders only
  std::vector<caf::actor> members;         ///< hierarchical leader: the group's other peers
  std::map<std::pair<std::int64_t, int>, std::pair<slice, float>> local; ///< leader: bucket views and final scales
  static inline const char* name = "ring_peer";
};

using peer_actor = caf::stateful_actor<peer_state>;

bool leader(const peer_state& s) { return s.cfg.hierarchical && s.cfg.group_pos == 0; }

/// Runs `fn`; a protocol error goes to the worker instead of killing the peer.
template <class F>
void guarded(peer_actor* self, std::int64_t round, F fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    self->send(as_reduced_taker(self->state.worker), reduce_failed_atom::value, round,
               "ring peer " + std::to_string(self->state.cfg.rank) + ": " + e.what());
  }
}

/// A bucket reduced by the last ring it goes through: to the worker.
void to_worker(peer_actor* self, ring_allreduce::done_info d) {
  self->send(as_reduced_taker(self->state.worker), reduced_atom::value, d.round, d.bucket, std::move(d.result), d.wait_seconds);
}

/// The group's result: flat rings and leaders of a one-group hierarchy are
/// done; a leader carries the group sum to the leaders' ring; other members
/// wait for their leader's broadcast instead.
void on_group_done(peer_actor* self, ring_allreduce::done_info d) {
  auto& st = self->state;
  if (!st.cfg.hierarchical) {
    to_worker(self, std::move(d));
    return;
  }
  if (!leader(st))
    return;
  const auto key = std::make_pair(d.round, d.bucket);
  auto held = st.local.at(key);
  auto view = held.first;
  const auto scale = held.second;
  st.local.erase(key);
  const std::size_t begin = st.cfg.buckets[static_cast<std::size_t>(d.bucket)].first;
  for (const auto& p : d.result) // the group sum, into the leader's own bucket view
    if (p.data.data() != view.data() + (p.offset - begin))
      std::memcpy(view.data() + (p.offset - begin), p.data.data(), static_cast<std::size_t>(p.data.numel()) * sizeof(float));
  guarded(self, d.round, [&] { st.leaders->start(self, d.round, d.bucket, view, scale); });
}

/// The leaders' ring is done: the leader broadcasts to its members.
void on_leaders_done(peer_actor* self, ring_allreduce::done_info d) {
  auto& st = self->state;
  if (st.leaders->size() == 1) // the result is the leader's own gradient buffer: share a copy
    for (auto& p : d.result) {
      auto copy = slice::empty({p.data.numel()});
      std::memcpy(copy.data(), p.data.data(), static_cast<std::size_t>(p.data.numel()) * sizeof(float));
      p.data = copy;
    }
  for (const auto& m : st.members)
    self->send(as_reduced_taker(m), reduced_atom::value, d.round, d.bucket, d.result, d.wait_seconds);
  to_worker(self, std::move(d));
}

/// The peer's rings: its group's, and a leader's ring of the leaders.
void init_peer(peer_actor* self, const ring_peer_config& cfg) {
  auto& s = self->state;
  s.cfg = cfg;
  const int ring_size = cfg.hierarchical ? cfg.group_size : cfg.world;
  const int ring_pos = cfg.hierarchical ? cfg.group_pos : cfg.rank;
  s.group = std::make_unique<ring_allreduce>(ring_pos, ring_size, 0, cfg.buckets, cfg.chunk_floats,
                                             [self](ring_allreduce::done_info d) { on_group_done(self, std::move(d)); });
  s.group->set_first_round(cfg.first_round);
  s.group->set_clock(cfg.vclock.get());
  if (cfg.wire_bf16 && !cfg.hierarchical)
    s.group->set_wire_bf16();
  if (leader(s)) {
    s.leaders = std::make_unique<ring_allreduce>(
      cfg.group, cfg.groups, 1, cfg.buckets, cfg.chunk_floats,
      [self](ring_allreduce::done_info d) { on_leaders_done(self, std::move(d)); });
    s.leaders->set_first_round(cfg.first_round);
    s.leaders->set_clock(cfg.vclock.get());
  }
  if (cfg.trace) { // one track for both rings: the peer runs them one message at a time
    auto t = trace_ref::open(cfg.trace, "ring peer " + std::to_string(cfg.rank), cfg.vclock.get());
    s.group->set_trace(t);
    if (s.leaders)
      s.leaders->set_trace(t);
  }
}

void wire_peer(peer_actor* self, caf::actor right, caf::actor leader_right, std::vector<caf::actor> members) {
  auto& st = self->state;
  st.group->set_right(std::move(right));
  if (st.leaders)
    st.leaders->set_right(std::move(leader_right));
  if (st.cfg.direct && !st.cfg.hierarchical) // flat direct allreduce: every peer, by rank
    st.group->set_direct(std::move(members));
  else
    st.members = std::move(members);
}

caf::behavior peer_behavior(peer_actor* self, ring_peer_config cfg) {
  refuse_unexpected(self, "ring peer " + std::to_string(cfg.rank));
  init_peer(self, cfg);
  return checked_behavior<ring_peer_actor>(
    [=](peer_wire_atom, caf::actor right, caf::actor leader_right, std::vector<caf::actor> members) {
      wire_peer(self, std::move(right), std::move(leader_right), std::move(members));
    },
    [=](reduce_atom, std::int64_t round, int bucket, slice view, float scale) {
      auto& st = self->state;
      kernels::flush_denormals_on_this_thread();
      st.worker = caf::actor_cast<caf::actor>(self->current_sender());
      guarded(self, round, [&] {
        if (leader(st))
          st.local[{round, bucket}] = {view, scale};
        st.group->start(self, round, bucket, view, st.cfg.hierarchical ? 1.f : scale);
      });
    },
    [=](ring_atom, int tag, std::int64_t round, int bucket, int chunk, int hop, slice data) {
      auto& st = self->state;
      guarded(self, round, [&] {
        check(tag == 0 || (tag == 1 && st.leaders), "chunk for ring " + std::to_string(tag) + ", not joined here");
        (tag == 0 ? st.group : st.leaders)->on_chunk(self, round, bucket, chunk, hop, std::move(data));
      });
    },
    [=](reduced_atom, std::int64_t round, int bucket, pieces result, double wait) {
      // hierarchical member: the leader's broadcast
      self->send(as_reduced_taker(self->state.worker), reduced_atom::value, round, bucket, std::move(result), wait);
    });
}

} // namespace

caf::actor spawn_ring_peer(caf::actor_system& sys, const ring_peer_config& cfg) {
  return sys.spawn(peer_behavior, cfg);
}

ring_groups consecutive_groups(int n, int group_size) {
  ring_groups out;
  if (group_size <= 0)
    return out;
  for (int r = 0; r < n; ++r)
    out.push_back(r / group_size);
  return out;
}

namespace {
/// Where rank r sits in `groups`: its group's index (groups in the order of
/// their lowest rank) and members (ascending), and every group's leader.
struct group_place {
  int group = 0;
  std::vector<int> members;
  std::vector<int> leaders;
};

group_place place_of(int r, int n, const ring_groups& groups) {
  check(n >= 1 && r >= 0 && r < n, "ring peers: rank " + std::to_string(r) + " of " + std::to_string(n));
  group_place out;
  if (groups.empty()) { // flat: one group of all
    for (int m = 0; m < n; ++m)
      out.members.push_back(m);
    out.leaders = {0};
    return out;
  }
  check(static_cast<int>(groups.size()) == n, "ring peers: " + std::to_string(groups.size()) + " group entries for " +
                                                  std::to_string(n) + " ranks (one per rank expected)");
  std::map<int, int> index; // a group's number -> its index, by lowest rank
  for (int m = 0; m < n; ++m)
    if (index.emplace(groups[static_cast<std::size_t>(m)], static_cast<int>(index.size())).second)
      out.leaders.push_back(m);
  out.group = index.at(groups[static_cast<std::size_t>(r)]);
  for (int m = 0; m < n; ++m)
    if (groups[static_cast<std::size_t>(m)] == groups[static_cast<std::size_t>(r)])
      out.members.push_back(m);
  return out;
}
} // namespace

ring_peer_config ring_peer_layout(int r, int n, const std::vector<std::pair<std::size_t, std::size_t>>& buckets,
                                  std::size_t chunk_floats, const ring_groups& groups) {
  const auto at = place_of(r, n, groups);
  ring_peer_config pc;
  pc.rank = r;
  pc.world = n;
  pc.buckets = buckets;
  pc.chunk_floats = chunk_floats;
  pc.hierarchical = !groups.empty();
  pc.group = at.group;
  pc.group_pos = static_cast<int>(std::find(at.members.begin(), at.members.end(), r) - at.members.begin());
  pc.group_size = static_cast<int>(at.members.size());
  pc.groups = static_cast<int>(at.leaders.size());
  return pc;
}

ring_peer_links ring_peer_wiring(int r, int n, const ring_groups& groups) {
  const auto at = place_of(r, n, groups);
  const auto len = at.members.size();
  const auto pos = static_cast<std::size_t>(std::find(at.members.begin(), at.members.end(), r) - at.members.begin());
  ring_peer_links out;
  out.right = at.members[(pos + 1) % len];
  if (!groups.empty() && pos == 0) {
    out.leader_right = at.leaders[(static_cast<std::size_t>(at.group) + 1) % at.leaders.size()];
    out.members.assign(at.members.begin() + 1, at.members.end());
  }
  return out;
}

std::vector<caf::actor> spawn_ring_peers(caf::actor_system& sys, int n,
                                         const std::vector<std::pair<std::size_t, std::size_t>>& buckets,
                                         std::size_t chunk_floats, const ring_groups& groups, std::shared_ptr<tracer> trace,
                                         bool direct, std::int64_t first_round, std::shared_ptr<virtual_clock> vclock,
                                         const std::function<caf::actor(const caf::actor&, int)>& place) {
  std::vector<caf::actor> peers;
  for (int r = 0; r < n; ++r) {
    auto pc = ring_peer_layout(r, n, buckets, chunk_floats, groups);
    pc.trace = trace;
    pc.direct = direct && groups.empty();
    pc.first_round = first_round;
    pc.vclock = vclock;
    auto peer = spawn_ring_peer(sys, pc);
    peers.push_back(place ? place(peer, r) : peer);
  }
  auto at = [&](int r) { return r < 0 ? caf::actor{} : peers[static_cast<std::size_t>(r)]; };
  for (int r = 0; r < n; ++r) {
    auto w = ring_peer_wiring(r, n, groups);
    std::vector<caf::actor> members;
    for (int m : w.members)
      members.push_back(at(m));
    if (direct && groups.empty())
      members = peers;
    caf::anon_send(as_ring_peer(peers[static_cast<std::size_t>(r)]), peer_wire_atom::value, at(w.right), at(w.leader_right), members);
  }
  return peers;
}

} // namespace gradwire::actors
