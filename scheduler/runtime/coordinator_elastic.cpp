/// @file coordinator_elastic.cpp
/// The coordinator when a worker is lost: an elastic ring re-forms (the
/// survivors agree on a step, one behind takes a live peer's state), a
/// parameter server or gossip goes on without it, and a worker whose
/// process comes back is let back into the ring.
#include "scheduler/runtime/coordinator_state.hpp"
#include "actors/worker_protocol.hpp"
#include "scheduler/runtime/reform_decision.hpp"
#include "kernels/log.hpp"

#include <cstdio>

namespace gradwire::scheduler::detail {

void coordinator_state::start_reform() {
  reform.survivors.clear();
  for (std::size_t r = 0; r < n; ++r)
    if (!finished[r])
      reform.survivors.push_back(static_cast<std::int64_t>(r));
  if (static_cast<int>(reform.survivors.size()) < std::max(1, elastic->min_workers)) {
    out.failure = out.faults.back().what + " (" + std::to_string(reform.survivors.size()) +
                  " worker(s) left, train.min_workers = " + std::to_string(elastic->min_workers) + ")";
    return;
  }
  ++reform.generation;
  reform.replies.clear();
  reform.step = -1;
  reform.adopting.clear();
  for (auto r : reform.survivors)
    (*self)->send(actors::as_ring_worker((*workers)[static_cast<std::size_t>(r)]), actors::abandon_atom::value,
                  reform.generation);
}

void coordinator_state::on_reform_reply(int rank, std::int64_t at, bool abandoned) {
  if (!known(rank) || reform.survivors.empty() || reform.step >= 0)
    return;
  reform.replies[rank] = {at, abandoned};
  if (rank == reform.joining && at == 0 && carried.size() == n) // a new process: the old one's samples still count
    carried[static_cast<std::size_t>(rank)] += out.reports[static_cast<std::size_t>(rank)].samples;
  live.last_seen[static_cast<std::size_t>(rank)] = clock_type::now();
  for (auto r : reform.survivors)
    if (!reform.replies.count(static_cast<int>(r)))
      return;
  if (reform.awaiting >= 0 && reform.joining != reform.awaiting) { // held at back_at_step: the ring waits for it here
    if (reform.parked_since == clock_type::time_point{})
      reform.parked_since = clock_type::now();
    return;
  }
  decide_reform();
}

void coordinator_state::decide_reform() {
  const auto d = scheduler::decide_reform(reform.replies, elastic->host_of);
  reform.step = d.step;
  if (reform.joining < 0 && !reform.waited) { // a loss (a worker coming back, or the wait for one, is no fault)
    auto& f = out.faults.back();
    f.at_step = d.step;
    f.steps_lost = d.lost_round ? 1 : 0;
  }
  // Each survivor behind takes a donor's state straight from it, the
  // donors in turn: no state passes through this rank.
  for (const auto& [donor, behind] : d.transfers) {
    reform.adopting.insert(behind);
    (*self)->send(actors::as_ring_worker((*workers)[static_cast<std::size_t>(donor)]), actors::give_atom::value, reform.generation,
                  (*workers)[static_cast<std::size_t>(behind)]);
  }
  if (reform.adopting.empty())
    rewire();
}

void coordinator_state::on_adopted(int rank, int of_generation) {
  if (of_generation != reform.generation || reform.step < 0 || reform.adopting.erase(rank) == 0)
    return;
  live.last_seen[static_cast<std::size_t>(rank)] = clock_type::now();
  if (reform.adopting.empty())
    rewire();
}

void coordinator_state::rewire() {
  const auto m = reform.survivors.size();
  const auto& ring = reform.survivors;
  for (std::size_t i = 0; i < m; ++i)
    (*self)->send(actors::as_ring_worker((*workers)[static_cast<std::size_t>(ring[i])]), actors::rewire_atom::value, reform.generation, ring,
                  (*workers)[static_cast<std::size_t>(ring[(i + 1) % m])]);
  // [[faults]] back_at_step of a lost worker: the ring holds at that step
  // for it. The workers hold there themselves: their reports reach this
  // thread a step or two late, so a wait begun here would overshoot it.
  for (const auto& [rank, at] : reform.back_at)
    if (lost(static_cast<std::size_t>(rank)) && at >= reform.step)
      for (auto r : reform.survivors)
        (*self)->send(actors::as_ring_worker((*workers)[static_cast<std::size_t>(r)]), actors::hold_at_atom::value, at);
  if (reform.joining >= 0) { // a lost worker came back: its fault says when
    for (auto it = out.faults.rbegin(); it != out.faults.rend(); ++it)
      if (it->rank == reform.joining) {
        it->rejoined_at = now_s();
        it->rejoined_step = reform.step;
        break;
      }
    log::info("worker {} is back: the ring goes on with {} workers from step {}", reform.joining, m, reform.step);
    reform.joining = -1;
    reform.awaiting = -1;
    reform.parked_since = {};
    reform.waited = false;
    reform.survivors.clear();
    take_next_join();
    return;
  }
  if (reform.waited) { // waited for a worker that did not come
    log::info("the ring goes on with {} workers from step {}", m, reform.step);
    reform.waited = false;
    reform.survivors.clear();
    take_next_join();
    return;
  }
  auto& f = out.faults.back();
  f.recovered_at = now_s();
  f.workers_after = static_cast<int>(m);
  log::warn("the ring goes on without worker {}: {} workers from step {} ({:.2f} s after the loss was detected)",
    f.rank, m, reform.step, f.recovered_at - f.detected_at);
  reform.survivors.clear();
  take_next_join();
}

void coordinator_state::on_rejoin(int rank) {
  if (!known(rank) || elastic == nullptr || !elastic->on || !elastic->readmit || stop.requested || !out.failure.empty())
    return;
  if (std::find(out.lost.begin(), out.lost.end(), rank) == out.lost.end() || rank == reform.joining)
    return;
  if (rank == reform.awaiting && !reform.survivors.empty() && reform.step < 0 && reform.joining < 0) { // the ring waits
    readmit_worker(rank);
    auto& ring = reform.survivors;
    ring.insert(std::upper_bound(ring.begin(), ring.end(), static_cast<std::int64_t>(rank)), static_cast<std::int64_t>(rank));
    (*self)->send(actors::as_ring_worker((*workers)[static_cast<std::size_t>(rank)]), actors::abandon_atom::value,
                  reform.generation);
    return;
  }
  if (const auto hold = reform.back_at.find(rank); hold != reform.back_at.end()) { // [[faults]] back_at_step: not before
    if (std::find(reform.held.begin(), reform.held.end(), rank) == reform.held.end()) {
      reform.held.push_back(rank);
      log::info("worker {} asks to come back: the ring takes it in at step {} (back_at_step)", rank, hold->second);
    }
    return;
  }
  if (!reform.survivors.empty() || reform.joining >= 0) { // after the re-form in flight
    if (std::find(reform.joins.begin(), reform.joins.end(), rank) == reform.joins.end())
      reform.joins.push_back(rank);
    return;
  }
  readmit_worker(rank);
  start_reform();
}

void coordinator_state::on_reformed(int rank, std::int64_t at, bool lost_round, double at_s, int after) {
  if (!virtual_time)
    return;
  for (auto it = out.faults.rbegin(); it != out.faults.rend(); ++it)
    if (it->rank == rank) {
      it->at_step = at;
      it->steps_lost = lost_round ? 1 : 0;
      it->recovered_at = at_s;
      it->workers_after = after;
      return;
    }
}

void coordinator_state::on_rejoined(int rank, std::int64_t at, double at_s) {
  if (!virtual_time || !known(rank) || !lost(static_cast<std::size_t>(rank)))
    return;
  const auto r = static_cast<std::size_t>(rank);
  carried[r] += out.reports[r].samples; // a new process: the old one's samples still count
  out.lost.erase(std::find(out.lost.begin(), out.lost.end(), rank));
  finished[r] = false;
  --done;
  for (auto it = out.faults.rbegin(); it != out.faults.rend(); ++it)
    if (it->rank == rank) {
      it->rejoined_at = at_s;
      it->rejoined_step = at;
      return;
    }
}

void coordinator_state::readmit_worker(int rank) {
  const auto r = static_cast<std::size_t>(rank);
  elastic->readmit(rank);
  out.lost.erase(std::find(out.lost.begin(), out.lost.end(), rank));
  finished[r] = false;
  --done;
  live.last_seen[r] = clock_type::now();
  reform.joining = rank;
  log::info("worker {} asks to come back: re-forming the ring with it", rank);
}

std::int64_t coordinator_state::furthest_step() const {
  std::int64_t most = 0;
  for (std::size_t r = 0; r < n; ++r)
    if (!lost(r))
      most = std::max(most, steps[r]);
  return most;
}

void coordinator_state::take_held() {
  if (reform.awaiting >= 0) { // parked: the awaited worker has not come within the bound
    if (reform.parked_since != clock_type::time_point{} && kernels::waited_longer(reform.parked_since, park_bound())) {
      log::warn("worker {} did not come back within {} ms: the ring goes on without it",
        reform.awaiting, park_bound().count());
      reform.awaiting = -1;
      reform.parked_since = {};
      decide_reform();
    }
    return;
  }
  if (reform.back_at.empty() || !reform.survivors.empty() || reform.joining >= 0)
    return;
  const auto at = furthest_step();
  for (auto it = reform.back_at.begin(); it != reform.back_at.end(); ++it)
    if (at >= it->second && lost(static_cast<std::size_t>(it->first))) {
      // The ring stops at this step (a re-form) and waits for the worker.
      reform.awaiting = it->first;
      reform.waited = true;
      reform.held.erase(std::remove(reform.held.begin(), reform.held.end(), reform.awaiting), reform.held.end());
      reform.back_at.erase(it); // once: a later loss of it is a new fault
      log::info("step {}: the ring waits for worker {} (back_at_step)", at, reform.awaiting);
      start_reform();
      return;
    }
}

void coordinator_state::take_next_join() {
  while (!reform.joins.empty() && reform.joining < 0 && reform.survivors.empty()) {
    const int r = reform.joins.front();
    reform.joins.erase(reform.joins.begin());
    on_rejoin(r);
  }
}

void coordinator_state::go_on_without() {
  std::vector<std::int64_t> left; // not lost (some may have finished their steps already)
  for (std::size_t r = 0; r < n; ++r)
    if (std::find(out.lost.begin(), out.lost.end(), static_cast<int>(r)) == out.lost.end())
      left.push_back(static_cast<std::int64_t>(r));
  auto& f = out.faults.back();
  if (static_cast<int>(left.size()) < std::max(1, elastic->min_workers)) {
    out.failure = f.what + " (" + std::to_string(left.size()) + " worker(s) left, train.min_workers = " +
                  std::to_string(elastic->min_workers) + ")";
    return;
  }
  ++reform.generation;
  for (const auto& s : elastic->shards)
    (*self)->send(s, actors::reform_atom::value, reform.generation, left);
  for (auto r : left)
    (*self)->send(actors::as_reform_taker((*workers)[static_cast<std::size_t>(r)]), actors::reform_atom::value,
                  reform.generation, left);
  std::int64_t most = 0;
  for (auto r : left)
    most = std::max(most, steps[static_cast<std::size_t>(r)]);
  f.at_step = most;
  f.steps_lost = 0;
  f.recovered_at = now_s();
  f.workers_after = static_cast<int>(left.size());
  log::warn("carrying on without worker {}: {} workers", f.rank, left.size());
}

void coordinator_state::on_lost(actors::worker_report rep) {
  if (!known(rep.rank) || finished[static_cast<std::size_t>(rep.rank)])
    return;
  // Reported by a rank that lost a neighbour (join_across.cpp): when that
  // rank is gone by now itself (a link down between the two: each reports
  // the other, and the first report processed decides), its word no
  // longer counts.
  if (known(rep.reported_by) && lost(static_cast<std::size_t>(rep.reported_by)))
    return;
  // Reported by another rank (it lost contact), the lost rank may still
  // be running: it is cut off and told so, and leaves the job.
  if (cut_off && rep.rank != 0 && !stop.requested && (carry_on || (elastic != nullptr && elastic->on)))
    cut_off(rep.rank, rep.error);
  if (elastic != nullptr && elastic->on && !stop.requested) {
    lose_elastic(std::move(rep));
    return;
  }
  if (!carry_on && !stop.requested) {
    out.failure = rep.error;
    if (elastic != nullptr && !elastic->why_not.empty())
      out.failure += " (" + elastic->why_not + ")";
    return;
  }
  lose_and_carry_on(std::move(rep));
}

void coordinator_state::mark_lost(std::size_t r, actors::worker_report rep, double seconds) {
  rep.steps = steps[r];
  rep.samples = samples[r];
  rep.seconds = seconds;
  out.lost.push_back(static_cast<int>(r));
  finished[r] = true;
  ++done;
  out.reports[r] = std::move(rep);
}

void coordinator_state::lose_elastic(actors::worker_report rep) {
  const auto r = static_cast<std::size_t>(rep.rank);
  const int rank = rep.rank;
  if (rank == reform.joining) // lost again while coming back
    reform.joining = -1;
  reform.waited = false; // the re-form from here is this loss's
  log::warn("lost worker {}: {}", r, rep.error);
  fault_record f;
  f.origin = t0;
  f.rank = rank;
  f.what = rep.error;
  f.detected_at = now_s();
  out.faults.push_back(f);
  mark_lost(r, std::move(rep), now_s());
  if (elastic->tell_survivors) {
    go_on_without();
    if (out.failure.empty() && elastic->holds_shards && elastic->holds_shards(rank))
      ask_rebuild(rank);
  } else
    start_reform();
  complete_pending(*self);
}

void coordinator_state::lose_and_carry_on(actors::worker_report rep) {
  const auto r = static_cast<std::size_t>(rep.rank);
  log::warn("carrying on without worker {}: {}", r, rep.error);
  // In virtual time the lost worker's own clock dates it, and its report
  // counts its steps: heartbeats there come at the loop's pace, not the run's.
  const double at = virtual_time ? rep.seconds : now_s();
  if (virtual_time) {
    steps[r] = std::max(steps[r], rep.steps);
    samples[r] = std::max(samples[r], rep.samples);
  }
  if (!stop.requested) {
    fault_record f;
    f.origin = t0;
    f.rank = rep.rank;
    f.what = rep.error;
    f.detected_at = f.recovered_at = at;
    f.at_step = steps[r];
    f.workers_after = static_cast<int>(n - out.lost.size()) - 1;
    out.faults.push_back(f);
  }
  mark_lost(r, std::move(rep), at);
}

void coordinator_state::ask_rebuild(int rank) {
  rebuild.ranks.push_back(rank);
  if (rebuild.from >= 0)
    return; // the replica asked for rebuilds them all
  for (std::size_t r = 0; r < n && rebuild.from < 0; ++r)
    if (!finished[r] && !lost(r))
      rebuild.from = static_cast<int>(r);
  if (rebuild.from < 0) {
    out.failure = "rank " + std::to_string(rank) + " held parameter-server shards and was lost after every other "
                  "worker had finished: no replica is left to rebuild them from (resume from a checkpoint)";
    return;
  }
  (*self)->send(actors::as_ps_worker((*workers)[static_cast<std::size_t>(rebuild.from)]), actors::replica_atom::value,
                std::int64_t{reform.generation});
}

bool coordinator_state::on_rebuild_state(const std::string& meta, const actors::slice& floats) {
  if (rebuild.from < 0)
    return false;
  std::vector<float> params;
  try {
    const auto f = actors::snapshot_frame::checked(meta, floats, "a replica to rebuild shards from");
    if (f.who != "worker " + std::to_string(rebuild.from))
      return false;
    params = actors::snapshot::from_parts(meta, floats.defined() ? floats.data() : nullptr,
                                          floats.defined() ? static_cast<std::size_t>(floats.numel()) : 0,
                                          "worker " + std::to_string(rebuild.from))
               .f("params");
  } catch (const std::exception&) {
    return false;
  }
  // An async shard moves a version per push: the pushes so far.
  std::int64_t version = 0;
  std::vector<bool> in_run(n);
  for (std::size_t r = 0; r < n; ++r) {
    version += steps[r];
    in_run[r] = !lost(r);
  }
  for (int rank : rebuild.ranks) {
    const auto moved = elastic->rebuild_shards(rank, params, version, steps, in_run);
    for (const auto& [i, shard] : moved) {
      gather->replace_shard(static_cast<std::size_t>(i), shard);
      for (std::size_t r = 0; r < n; ++r)
        if (!finished[r])
          (*self)->send(actors::as_ps_worker((*workers)[r]), actors::rebuilt_atom::value, i, caf::actor_cast<caf::actor>(shard));
    }
    log::warn("{} shard(s) of lost rank {} rebuilt on rank 0 from worker {}'s replica (version {}); their optimizer "
      "state starts afresh", moved.size(), rank, rebuild.from, version);
  }
  rebuild.ranks.clear();
  rebuild.from = -1;
  heard_all();
  return true;
}

} // namespace gradwire::scheduler::detail
