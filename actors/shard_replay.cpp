/// @file shard_replay.cpp
/// A shard in a replay (shard_config::replay): pushes and pulls are held
/// until the record says they happened, then taken exactly as the run took
/// them. Workers wait on their own requests, so the order comes about with
/// no clock: any schedule of the replay's threads ends in the same bits.

#include "actors/ps_shard_state.hpp"

#include <string>
#include <utility>

namespace gradwire::actors::shard_detail {
namespace {

std::string describe(const record_entry& e) {
  return "worker " + std::to_string(e.rank) + (e.serve ? "'s pull for step " : "'s push of step ") +
         std::to_string(e.step);
}

/// "pull for step 3", "push of step 2".
std::string what_of(const held_message& m, std::int64_t clock) {
  const bool pull = m.kind == held_message::what::pull;
  return std::string(pull ? "pull for step " : "push of step ") + std::to_string(pull ? clock : m.step) +
         (m.kind == held_message::what::push_pull ? " (with a pull)" : "");
}

std::string describe(const held_message& m, int rank, std::int64_t clock) {
  return "worker " + std::to_string(rank) + "'s " + what_of(m, clock);
}

void refuse(const shard_state& st, held_message& m, const std::string& why) {
  m.promise.deliver(caf::make_error(caf::sec::invalid_argument,
                                    "shard " + std::to_string(st.cfg.id) + ": replay: " + why));
}

/// The entry due next from `rank`, or null when its entries are used up.
const record_entry* due_of(const replay_gate& g, int rank) {
  const auto r = static_cast<std::size_t>(rank);
  if (g.mine_next[r] >= g.mine[r].size())
    return nullptr;
  return &g.record->entries[g.mine[r][g.mine_next[r]]];
}

/// Whether `m` is the update `e` records.
bool matches(const shard_state& st, const held_message& m, int rank, const record_entry& e) {
  if (m.kind == held_message::what::pull)
    return e.serve && e.step == st.clocks[static_cast<std::size_t>(rank)];
  return !e.serve && e.step == m.step;
}

void advance(replay_gate& g, int rank) {
  ++g.next;
  ++g.mine_next[static_cast<std::size_t>(rank)];
}

/// The push in `m`, applied; its reply waits for the pull of a push and
/// pull in one (then `with_pull`).
void take_push_held(shard_state& st, held_message& m, int rank, const record_entry& e) {
  auto out = take_push(st, rank, m.base_version, m.step, m.samples, m.grad);
  auto& g = *st.gate;
  advance(g, rank);
  if (!out.error.empty())
    return refuse(st, m, out.error);
  if (out.staleness != e.staleness)
    return refuse(st, m, describe(e) + " was applied at staleness " + std::to_string(e.staleness) + ", here at " +
                           std::to_string(out.staleness) + " (the replay diverged from the record)");
  if (m.kind == held_message::what::push) {
    m.promise.deliver(out.staleness, st.version);
    return;
  }
  const auto* pull = g.next < g.record->entries.size() ? &g.record->entries[g.next] : nullptr;
  if (!pull || !pull->serve || pull->rank != rank || pull->step != m.step + 1)
    return refuse(st, m, describe(e) + " came with a pull the record does not hold right after it");
  advance(g, rank);
  m.promise.deliver(out.staleness, st.version, answer(st, rank));
}

/// Takes every held message whose entry is due, in the record's order.
void run_gate(shard_state& st) {
  auto& g = *st.gate;
  while (g.next < g.record->entries.size()) {
    const auto& e = g.record->entries[g.next];
    auto& m = g.held[static_cast<std::size_t>(e.rank)];
    if (m.kind == held_message::what::none)
      return; // its worker has not sent it yet
    if (m.kind != held_message::what::pull) {
      take_push_held(st, m, e.rank, e);
    } else if (!ready(st, m.min_version, m.min_clock)) {
      advance(g, e.rank);
      refuse(st, m, describe(e) + " is due, but the shard's clocks hold it back (the replay diverged from the record)");
    } else {
      advance(g, e.rank);
      m.promise.deliver(st.version, answer(st, e.rank), 0.0);
    }
    m = held_message{};
  }
}

} // namespace

replay_gate open_gate(std::shared_ptr<const shard_record> record, int workers) {
  replay_gate g;
  const auto n = static_cast<std::size_t>(std::max(1, workers));
  g.mine.resize(n);
  g.mine_next.assign(n, 0);
  g.held.resize(n);
  for (std::size_t i = 0; i < record->entries.size(); ++i) {
    const auto r = static_cast<std::size_t>(record->entries[i].rank);
    if (r < n)
      g.mine[r].push_back(i);
  }
  g.record = std::move(record);
  return g;
}

void hold_for_turn(shard_self self, int rank, held_message m) {
  auto& st = self->state;
  auto& g = *st.gate;
  if (rank < 0 || static_cast<std::size_t>(rank) >= g.held.size())
    return refuse(st, m, "a message from unknown rank " + std::to_string(rank));
  const auto clock = st.clocks[static_cast<std::size_t>(rank)];
  if (g.held[static_cast<std::size_t>(rank)].kind != held_message::what::none)
    return refuse(st, m, describe(m, rank, clock) + " while its earlier message waits for its turn");
  const auto* e = due_of(g, rank);
  if (!e)
    return refuse(st, m, "the record holds nothing more from worker " + std::to_string(rank) + ", which sent its " +
                           what_of(m, clock));
  if (!matches(st, m, rank, *e))
    return refuse(st, m, "the record has " + describe(*e) + " next, where the replay sent " + describe(m, rank, clock) +
                           " (the replay diverged from the record: another config?)");
  g.held[static_cast<std::size_t>(rank)] = std::move(m);
  run_gate(st);
}

} // namespace gradwire::actors::shard_detail
