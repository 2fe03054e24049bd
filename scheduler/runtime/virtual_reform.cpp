#include "scheduler/runtime/virtual_reform.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/checked_behavior.hpp"
#include "actors/coordinator_protocol.hpp"

#include "actors/messages.hpp"
#include "actors/refuse.hpp"
#include "actors/virtual_clock.hpp"
#include "kernels/log.hpp"
#include "scheduler/runtime/reform_decision.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace gradwire::scheduler {

namespace {

struct reformer_state {
  virtual_reform_plan plan;
  std::vector<caf::actor> workers; ///< placed handles, by rank (a replacement's once it is back)
  caf::actor me;                   ///< this actor's placed handle
  std::vector<bool> live;          ///< by rank
  actors::virtual_clock::time_point t0;
  int generation = 0;
  /// The re-form in flight (members empty: none).
  std::vector<std::int64_t> members;
  std::map<int, std::pair<std::int64_t, bool>> replies; ///< rank -> (steps, abandoned a round)
  std::int64_t at = -1;                                 ///< decided: the step all go on from
  std::set<int> adopting; ///< survivors behind, until each has taken a donor's state
  std::vector<int> lost;   ///< ranks lost since the ring last re-formed
  bool lost_round = false; ///< a survivor abandoned a round for them
  int joining = -1;        ///< a replacement in this re-form
  int restarts_left = 0;
  std::vector<int> knocks; ///< new processes asking back in, while the ring is busy
  /// A replacement waited for: the survivors hold at wait_step.
  int awaiting = -1;
  std::int64_t wait_step = -1;
  std::set<int> paused;

  bool known(int rank) const { return rank >= 0 && static_cast<std::size_t>(rank) < live.size(); }
  const caf::actor& at_rank(std::int64_t r) const { return workers[static_cast<std::size_t>(r)]; }
  double seconds() const { return std::chrono::duration<double>(plan.clock->now() - t0).count(); }

  static inline const char* name = "virtual_reformer";
};

using reformer_actor = caf::stateful_actor<reformer_state>;

/// Asks every live worker to abandon its round and say how far it got.
void start_reform(reformer_actor* self) {
  auto& st = self->state;
  st.members.clear();
  for (std::size_t r = 0; r < st.live.size(); ++r)
    if (st.live[r])
      st.members.push_back(static_cast<std::int64_t>(r));
  ++st.generation;
  st.replies.clear();
  st.at = -1;
  st.adopting.clear();
  for (auto r : st.members)
    self->send(actors::as_ring_worker(st.at_rank(r)), actors::abandon_atom::value, st.generation);
}

void join(reformer_actor* self, int rank) {
  auto& st = self->state;
  const auto r = static_cast<std::size_t>(rank);
  st.awaiting = -1;
  st.plan.back_at_step.erase(rank);
  st.workers[r] = st.plan.respawn(rank, st.me);
  st.live[r] = true;
  st.joining = rank;
  log::info("worker {} comes back (a new process): re-forming the ring with it", rank);
  self->send(actors::as_ring_worker(st.workers[r]), actors::wire_atom::value, st.workers[(r + 1) % st.workers.size()], st.workers);
  start_reform(self);
}

/// After a re-form: the next new process that asked back in meanwhile,
/// or the next lost worker due back at its back_at_step, let in at once
/// if the ring is at that step already, else held for there.
void plan_rejoin(reformer_actor* self) {
  auto& st = self->state;
  st.awaiting = -1;
  st.paused.clear();
  while (!st.knocks.empty()) {
    const int rank = st.knocks.front();
    st.knocks.erase(st.knocks.begin());
    if (!st.live[static_cast<std::size_t>(rank)]) {
      join(self, rank);
      return;
    }
  }
  for (const auto& [rank, step] : st.plan.back_at_step) {
    if (!st.known(rank) || st.live[static_cast<std::size_t>(rank)])
      continue;
    if (step <= st.at) {
      join(self, rank);
      return;
    }
    st.awaiting = rank;
    st.wait_step = step;
    for (std::size_t r = 0; r < st.live.size(); ++r)
      if (st.live[r])
        self->send(actors::as_ring_worker(st.workers[r]), actors::hold_at_atom::value, step);
    return;
  }
}

/// The new ring: every member's place and right neighbour; the coordinator
/// hears what it would have recorded.
void rewire(reformer_actor* self) {
  auto& st = self->state;
  const auto m = st.members.size();
  for (std::size_t i = 0; i < m; ++i)
    self->send(actors::as_ring_worker(st.at_rank(st.members[i])), actors::rewire_atom::value, st.generation, st.members,
               st.at_rank(st.members[(i + 1) % m]));
  const double t = st.seconds();
  for (int r : st.lost) {
    self->send(actors::as_coordinator(st.plan.coordinator), actors::reformed_atom::value, r, st.at, st.lost_round, t, static_cast<int>(m));
    log::warn("the ring goes on without worker {}: {} workers from step {} (virtual time {:.6f} s)", r, m, st.at, t);
  }
  if (st.joining >= 0) {
    self->send(actors::as_coordinator(st.plan.coordinator), actors::rejoined_atom::value, st.joining, st.at, t);
    log::info("worker {} is back: the ring goes on with {} workers from step {}", st.joining, m, st.at);
  }
  st.lost.clear();
  st.lost_round = false;
  st.joining = -1;
  st.members.clear();
  plan_rejoin(self);
}

void decide(reformer_actor* self) {
  auto& st = self->state;
  const auto d = decide_reform(st.replies, st.plan.host_of);
  st.at = d.step;
  st.lost_round = st.lost_round || d.lost_round;
  for (const auto& [donor, behind] : d.transfers) { // straight from the donors, no state through here
    st.adopting.insert(behind);
    self->send(actors::as_ring_worker(st.at_rank(donor)), actors::give_atom::value, st.generation, st.at_rank(behind));
  }
  if (st.adopting.empty())
    rewire(self);
}

/// A lost rank's new process, while train.restarts last: it asks back in
/// restart_s from now, or comes at its back_at_step.
void expect_back(reformer_actor* self, int rank) {
  auto& st = self->state;
  if (st.restarts_left <= 0) {
    st.plan.back_at_step.erase(rank);
    return;
  }
  --st.restarts_left;
  const auto after = std::chrono::nanoseconds(static_cast<std::int64_t>(st.plan.restart_s * 1e9));
  if (!st.plan.back_at_step.count(rank))
    self->delayed_send(as_virtual_reformer(self), after, actors::knock_atom::value, rank);
}

/// A new process asks back in: a re-form with it now, or once the ring is
/// done with the one in flight (or the wait at a back_at_step).
void on_knock(reformer_actor* self, int rank) {
  auto& st = self->state;
  if (!st.known(rank) || st.live[static_cast<std::size_t>(rank)])
    return;
  if (!st.members.empty() || st.awaiting >= 0)
    st.knocks.push_back(rank);
  else
    join(self, rank);
}

void on_lost(reformer_actor* self, int rank) {
  auto& st = self->state;
  if (!st.known(rank) || !st.live[static_cast<std::size_t>(rank)])
    return;
  st.live[static_cast<std::size_t>(rank)] = false;
  if (rank == st.joining)
    st.joining = -1;
  else
    st.lost.push_back(rank);
  expect_back(self, rank);
  start_reform(self); // (one in flight starts again, with the survivors of this loss too)
}

void on_reply(reformer_actor* self, int rank, std::int64_t steps, bool abandoned) {
  auto& st = self->state;
  if (st.members.empty() || st.at >= 0 ||
      std::find(st.members.begin(), st.members.end(), static_cast<std::int64_t>(rank)) == st.members.end())
    return;
  st.replies[rank] = {steps, abandoned};
  if (st.replies.size() == st.members.size())
    decide(self);
}

void on_adopted(reformer_actor* self, int rank, int generation) {
  auto& st = self->state;
  if (generation != st.generation || st.at < 0 || st.adopting.erase(rank) == 0)
    return;
  if (st.adopting.empty())
    rewire(self);
}

void on_paused(reformer_actor* self, int rank, std::int64_t step) {
  auto& st = self->state;
  if (st.awaiting < 0 || !st.members.empty() || step < st.wait_step || !st.known(rank))
    return;
  st.paused.insert(rank);
  for (std::size_t r = 0; r < st.live.size(); ++r)
    if (st.live[r] && !st.paused.count(static_cast<int>(r)))
      return;
  join(self, st.awaiting);
}

caf::behavior reformer(reformer_actor* self, virtual_reform_plan plan) {
  auto& st = self->state;
  st.plan = std::move(plan);
  st.t0 = st.plan.clock->now();
  st.restarts_left = st.plan.restarts;
  actors::refuse_unexpected(self, "virtual time's reformer");
  return actors::checked_behavior<virtual_reformer_actor>(
    [=](actors::wire_atom, std::vector<caf::actor> workers, caf::actor me) {
      auto& s = self->state;
      s.workers = std::move(workers);
      s.me = std::move(me);
      s.live.assign(s.workers.size(), true);
    },
    [=](actors::lost_atom, const actors::worker_report& killed) { on_lost(self, killed.rank); },
    [=](actors::knock_atom, int rank) { on_knock(self, rank); },
    [=](actors::abandoned_atom, int rank, std::int64_t steps, bool abandoned) { on_reply(self, rank, steps, abandoned); },
    [=](actors::adopted_atom, int rank, int generation) { on_adopted(self, rank, generation); },
    [=](actors::paused_atom, int rank, std::int64_t step) { on_paused(self, rank, step); });
}

} // namespace

caf::actor spawn_virtual_reformer(caf::actor_system& sys, virtual_reform_plan plan) {
  return sys.spawn(reformer, std::move(plan));
}

} // namespace gradwire::scheduler
