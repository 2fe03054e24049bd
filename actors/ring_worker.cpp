#include "actors/ring_worker_state.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/coordinator_protocol.hpp"
#include "actors/worker.hpp"
#include "kernels/log.hpp"

#include "actors/batch_balance.hpp"
#include "actors/ring_allreduce.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

namespace gradwire::actors {
namespace ring_detail {


/// Gives the peer every bucket whose range starts at or above `from`
/// (buckets run from the end of the buffer, as backward fills it).
void hand_over(ring_worker_actor* self, std::size_t from) {
  auto& st = self->state;
  if (st.reforming)
    return; // the round was abandoned: a lost peer
  const auto& grads = st.trainer->gradients();
  const float scale = 1.f / static_cast<float>(st.ring_world);
  if (st.sharded && st.handed == 0)
    st.trainer->begin_update(); // this round's optimizer step, applied chunk by chunk as the ring owns them
  for (; st.handed < st.cfg.ring.buckets.size() && st.cfg.ring.buckets[st.handed].first >= from; ++st.handed) {
    const auto [b, e] = st.cfg.ring.buckets[st.handed];
    auto view = grads.view(b, {static_cast<std::int64_t>(e - b)});
    if (st.ring)
      st.ring->start(self, st.step, static_cast<int>(st.handed), view, scale);
    else
      self->send(st.cfg.ring.peer, reduce_atom::value, st.step, static_cast<int>(st.handed), view, scale);
  }
}

/// While a round is in progress, waits for the next message by polling the
/// mailbox (kernels::poll_until) instead of
/// returning to CAF, which blocks the detached thread on a condition
/// variable: then the neighbour's chunk costs a futex wake on both sides
/// (bench/RESULTS.md, "Measured effects").
void await_mail(ring_worker_actor* self) {
  auto& st = self->state;
  if (st.ring && st.in_round)
    st.await_mail(self);
}

std::unique_ptr<ring_allreduce> make_ring(ring_worker_actor* self, int pos, int world, int tag) {
  const auto& c = self->state.cfg;
  auto r = std::make_unique<ring_allreduce>(pos, world, tag, c.ring.buckets, c.ring.chunk_floats,
                                            [self](ring_allreduce::done_info d) {
                                              on_reduced(self, d.round, d.bucket, std::move(d.result), d.wait_seconds);
                                            });
  r->set_clock(c.vclock.get());
  if (c.ring.wire_bf16)
    r->set_wire_bf16();
  return r;
}

/// A peer is lost: abandons the round in flight and says how far it got.
void on_reform(ring_worker_actor* self, int generation) {
  auto& st = self->state;
  if (!st.cfg.ring.elastic || generation <= st.generation) {
    st.finish(self, st.who() + "a peer is lost and this ring is not elastic (generation " + std::to_string(generation) + ")");
    return;
  }
  const bool abandoned = st.in_round;
  st.reforming = true;
  st.generation = generation;
  st.in_round = false;
  st.ring.reset();
  for (auto& r : st.results)
    r.clear();
  st.handed = st.reduced = 0;
  self->send(as_reformer(st.reformer()), abandoned_atom::value, st.cfg.rank, st.step, abandoned);
}

/// The survivors' ring: this worker's place in it, its data re-sharded; go on.
void on_rewire(ring_worker_actor* self, int generation, const std::vector<std::int64_t>& survivors, caf::actor right) {
  auto& st = self->state;
  const auto it = std::find(survivors.begin(), survivors.end(), static_cast<std::int64_t>(st.cfg.rank));
  if (!st.reforming || generation != st.generation || it == survivors.end()) {
    st.finish(self, st.who() + "a new ring of generation " + std::to_string(generation) + " that does not hold it");
    return;
  }
  const int pos = static_cast<int>(it - survivors.begin()), world = static_cast<int>(survivors.size());
  st.ring_world = world;
  st.ring = make_ring(self, pos, world, generation);
  st.ring->set_first_round(st.step);
  st.ring->set_right(std::move(right));
  st.ring->set_trace(trace_ref::open(st.cfg.trace, "ring " + std::to_string(st.cfg.rank)));
  st.reshard(pos, world, generation);
  st.reforming = false;
  st.wait_at = -1; // (a wait for a worker coming back ends in this re-form)
  st.announce = pos == 0;
  begin_step(self);
  auto early = std::move(st.early);
  st.early.clear();
  try {
    for (auto& c : early)
      if (st.ring)
        st.ring->on_chunk(self, c.round, c.bucket, c.chunk, c.hop, std::move(c.data));
  } catch (const std::exception& e) {
    st.finish(self, st.who() + e.what());
  }
}

void start_round(ring_worker_actor* self, worker_core::clock_type::time_point t0, std::int64_t samples);

void begin_step(ring_worker_actor* self) {
  auto& st = self->state;
  if (st.step >= st.cfg.steps) {
    st.finish(self, {}, true);
    return;
  }
  if (st.hold(self) || st.reforming)
    return;
  if (st.cfg.ring.balance_every > 0 && !apply_balance(self))
    return; // resumed by the missing (balance_atom, ...)
  st.handed = st.reduced = 0;
  st.round_wait = 0;
  st.in_round = true;
  st.round_start = st.now();
  try {
    const auto t0 = st.now();
    const auto samples = st.report.samples;
    if (st.offloads() && !st.cfg.ring.overlap) { // virtual time: on the simulation's threads
      st.compute_offloaded([self, t0, samples] { start_round(self, t0, samples); });
      return;
    }
    const bool ran = st.cfg.ring.overlap ? st.compute(self, [self](std::size_t from) { hand_over(self, from); }) : st.compute(self);
    if (!ran) { // a stop between two layers: nothing of this round was handed over
      st.in_round = false;
      return;
    }
    start_round(self, t0, samples);
  } catch (const gradwire::error& ex) {
    st.finish(self, ex.what());
  }
}

/// After the step's batch (begun at `t0`, with `samples` trained before
/// it): its speed for the balancing, then the gradient into the ring.
void start_round(ring_worker_actor* self, worker_core::clock_type::time_point t0, std::int64_t samples) {
  auto& st = self->state;
  if (st.cfg.ring.balance_every > 0)
    st.report.batches.push_back(st.cfg.batch_size);
  st.bal.window.add_step(st.ran_since(t0), st.report.samples - samples); // (a stop of the job is no slowness)
  hand_over(self, 0);
  await_mail(self);
}

/// The round's payload bytes: the chunks this worker's own ring moved, or
/// with a peer actor (or the collective communicator) a ring allreduce's
/// volume, 2 (n - 1) / n of the gradient each way.
void count_bytes(ring_worker_state& st) {
  if (st.ring) {
    const auto [sent, received] = st.ring->take_bytes();
    st.report.bytes_sent += sent;
    st.report.bytes_received += received;
    return;
  }
  const auto n = static_cast<std::int64_t>(st.ring_world);
  const auto bytes = 2 * (n - 1) * static_cast<std::int64_t>(st.model->size() * sizeof(float)) / n;
  st.report.bytes_sent += bytes;
  st.report.bytes_received += bytes;
}

void on_reduced(ring_worker_actor* self, std::int64_t round, int bucket, pieces result, double wait) {
  auto& st = self->state;
  if (round != st.step || bucket < 0 || static_cast<std::size_t>(bucket) >= st.results.size()) {
    st.finish(self, st.who() + "reduced bucket " + std::to_string(bucket) + " of round " + std::to_string(round) +
                      " while at step " + std::to_string(st.step));
    return;
  }
  st.results[static_cast<std::size_t>(bucket)] = std::move(result);
  st.round_wait = std::max(st.round_wait, wait);
  if (++st.reduced < st.cfg.ring.buckets.size())
    return;
  st.in_round = false;
  st.end_comm();
  count_bytes(st);
  st.comm_to_compute(st.owned_apply); // the owned chunks' optimizer work is compute
  st.bal.window.add_fixed(st.owned_apply);
  st.owned_apply = 0;
  const auto t0 = st.now();
  if (st.sharded) { // the pieces are parameters, updated by their owners (this worker's own too)
    float* w = st.model->params().data();
    for (const auto& ps : st.results)
      for (const auto& p : ps)
        if (p.data.data() != w + p.offset)
          std::memcpy(w + p.offset, p.data.data(), static_cast<std::size_t>(p.data.numel()) * sizeof(float));
  } else {
    std::vector<models::trainer::grad_slice> slices;
    for (const auto& ps : st.results)
      for (const auto& p : ps)
        slices.push_back({p.offset, p.offset + static_cast<std::size_t>(p.data.numel()), p.data.data()});
    st.trainer->apply_slices(slices);
  }
  for (auto& ps : st.results)
    ps.clear(); // let go of the shared pieces
  st.bal.window.add_fixed(st.ran_since(t0));
  st.add_compute(t0); // the optimizer is part of the step's compute
  st.begin_comm();
  st.add_wait(st.round_wait, false); // the ring's track shows where it waited
  st.end_step(self);
  if (st.announce) {
    st.announce = false;
    if (st.cfg.vclock) // (the machine's time says nothing of a simulated run)
      log::info("rank {}: the first step of the re-formed ring (step {}) is done", st.cfg.rank, st.step);
    else
      log::info("rank {}: the first step of the re-formed ring (step {}) is done (unix time {:.6f})", st.cfg.rank,
        st.step, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  }
  share_speed(self);
  self->send(as_worker(self), tick_atom::value); // not begin_step(): this may run inside the ring's own call
}

/// The sharded update: the owner of a chunk applies the optimizer to it
/// and passes on a view of its updated parameters (read by the others
/// before this worker's next update of the chunk, which needs their next
/// round). With SGD the sum of the two contributions and the update are
/// one pass that writes only the weights (the reduction is folded into the
/// optimizer's read of the gradient, so it counts as its compute).
void init_sharded_update(ring_worker_actor* self) {
  auto& st = self->state;
  st.sharded = true;
  st.ring->set_on_owned([self](std::size_t offset, const float* in0, const float* in1, float scale, std::size_t n) {
    auto& s = self->state;
    const auto t0 = s.now();
    if (!s.trainer->apply_range_sum(offset, offset + n, in0, in1, scale, nullptr)) {
      auto& be = kernels::backend_for(kernels::device::cpu());
      auto& sum = s.owned_sum;
      if (static_cast<std::size_t>(sum.numel()) < n)
        sum = slice::empty({static_cast<std::int64_t>(n)});
      if (in1 != nullptr)
        be.add(n, in0, in1, sum.data(), scale);
      else {
        std::memcpy(sum.data(), in0, n * sizeof(float));
        if (scale != 1.f)
          be.scale(n, scale, sum.data());
      }
      s.trainer->apply_range(offset, offset + n, sum.data());
    }
    s.owned_apply += s.ran_since(t0);
    return s.model->params().view(offset, {static_cast<std::int64_t>(n)});
  });
}

/// Everything before the first message: balancing, the ring this worker
/// runs itself (without a peer actor), the sharded update. Throws.
void init_ring_worker(ring_worker_actor* self) {
  auto& st = self->state;
  const auto& c = st.cfg;
  st.results.resize(c.ring.buckets.size());
  if (c.ring.balance_every > 0)
    init_balancing(st);
  st.save_extra = [self](snapshot& s) {
    const auto& bb = self->state.bal.batches;
    if (!bb.empty())
      s.put("balance_batches", std::vector<std::int64_t>(bb.begin(), bb.end()));
  };
  st.ring_world = c.world;
  check(!c.ring.elastic || (c.ring.peer == nullptr && !c.ring.sharded_update && c.ring.balance_every == 0),
        "an elastic ring runs itself, without the sharded update or speed balancing");
  check(!c.ring.wire_bf16 || c.ring.peer == nullptr, "bf16 chunks run on a worker's own ring, without a ring peer");
  if (c.ring.peer != nullptr)
    return;
  st.ring = make_ring(self, c.rank, c.world, 0);
  st.ring->set_first_round(st.step); // a resumed run's first step
  st.ring->set_trace(trace_ref::open(c.trace, "ring " + std::to_string(c.rank), c.vclock.get()));
  if (c.ring.sharded_update && c.world > 1)
    init_sharded_update(self);
}

/// From the wiring: the ring is complete, start.
void on_wire(ring_worker_actor* self, caf::actor right, std::vector<caf::actor> all) {
  auto& s = self->state;
  if (s.cfg.ring.balance_every > 0 && all.size() != static_cast<std::size_t>(s.cfg.world)) {
    s.finish(self, s.who() + "speed balancing needs every worker's handle, got " + std::to_string(all.size()) +
                     " for " + std::to_string(s.cfg.world) + " workers");
    return;
  }
  s.bal.workers = std::move(all);
  if (s.ring)
    s.ring->set_right(std::move(right));
  if (!s.cfg.joining) // a replacement starts when the ring takes it in (on_rewire)
    begin_step(self);
}

/// A chunk of the ring this worker runs itself: stale ones (an older
/// generation) dropped, early ones of a new ring kept for its place in it.
void on_chunk(ring_worker_actor* self, int tag, std::int64_t round, int bucket, int chunk, int hop, slice data) {
  auto& s = self->state;
  if (tag < s.generation)
    return; // of a ring that lost a peer
  if (s.reforming) { // of the new ring, ahead of this worker's place in it
    if (tag == s.generation && s.early.size() < 4096)
      s.early.push_back({round, bucket, chunk, hop, std::move(data)});
    return;
  }
  if (tag != s.generation)
    return;
  try {
    if (s.ring == nullptr)
      throw error("a ring chunk, but this worker has a ring peer");
    s.ring->on_chunk(self, round, bucket, chunk, hop, std::move(data));
    await_mail(self);
  } catch (const std::exception& e) {
    s.finish(self, s.who() + e.what());
  }
}

/// A live peer's state for this worker, a step behind in a re-form: taken,
/// and said so (the ring is rewired once every one behind has).
void on_donor_state(ring_worker_actor* self, const std::string& meta, const slice& floats) {
  auto& s = self->state;
  if (!s.reforming)
    return; // of a re-form this worker is past
  try {
    s.adopt_donor(snapshot::from_parts(meta, floats.defined() ? floats.data() : nullptr,
                                       floats.defined() ? static_cast<std::size_t>(floats.numel()) : 0,
                                       s.who() + "a donor's state"));
  } catch (const std::exception& e) {
    s.finish(self, s.who() + e.what());
    return;
  }
  self->send(as_reformer(s.reformer()), adopted_atom::value, s.cfg.rank, s.generation);
}

/// The heartbeat doubles as the watchdog of the allreduce in progress.
void on_ring_beat(ring_worker_actor* self) {
  auto& s = self->state;
  if (s.bal.waiting && s.overdue(s.bal.wait_start)) {
    std::string missing;
    const auto it = s.bal.rounds.find(due_round(s));
    for (int r = 0; r < s.cfg.world; ++r)
      if (it == s.bal.rounds.end() || it->second.first[static_cast<std::size_t>(r)].steps == 0)
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    s.finish(self, s.who() + "speed measurements of step " + std::to_string(due_round(s)) + " missing after " +
                     std::to_string(s.cfg.request_timeout.count()) + " ms from rank(s) " + missing);
    return;
  }
  if (s.in_round && s.overdue(s.round_start)) {
    s.finish(self, s.who() + "allreduce of step " + std::to_string(s.step) + " incomplete after " +
                     std::to_string(s.cfg.request_timeout.count()) + " ms (" + std::to_string(s.reduced) + " of " +
                     std::to_string(s.cfg.ring.buckets.size()) + " buckets back from its ring peer)");
    return;
  }
  s.on_beat(self);
}

caf::behavior ring_worker_behavior(ring_worker_actor* self, worker_config cfg) {
  auto& st = self->state;
  if (!start_worker(self, std::move(cfg), [self] { init_ring_worker(self); }))
    return {};
  st.start_heartbeats(self);
  return behavior_with_controls<actors::ring_worker_actor>(
    self, [=] { self->state.finish(self, {}, true); }, [=] { begin_step(self); },
    [=](wire_atom, caf::actor right, std::vector<caf::actor> all) { on_wire(self, std::move(right), std::move(all)); },
    [=](balance_atom, std::int64_t round, int rank, double compute_s, double fixed_s, std::int64_t samples,
        std::int64_t steps) { on_speed(self, round, rank, speed_sample{compute_s, fixed_s, samples, steps}); },
    [=](ring_atom, int tag, std::int64_t round, int bucket, int chunk, int hop, slice data) {
      on_chunk(self, tag, round, bucket, chunk, hop, std::move(data));
    },
    [=](abandon_atom, int generation) { on_reform(self, generation); },
    [=](hold_at_atom, std::int64_t at) { self->state.wait_at = at; }, // hold there for a worker coming back
    [=](rewire_atom, int generation, const std::vector<std::int64_t>& survivors, caf::actor right) {
      on_rewire(self, generation, survivors, std::move(right));
    },
    [=](give_atom, int generation, const caf::actor& to) { // this worker's state for a survivor behind
      if (generation == self->state.generation)
        self->state.send_snapshot(self, to, worker_core::snapshot_for::donor);
    },
    [=](donor_atom, const std::string& meta, const slice& floats) { on_donor_state(self, meta, floats); },
    [=](beat_atom) { on_ring_beat(self); },
    [=](reduced_atom, std::int64_t round, int bucket, pieces result, double wait) {
      on_reduced(self, round, bucket, std::move(result), wait);
    },
    [=](reduce_failed_atom, std::int64_t, std::string error) { self->state.finish(self, self->state.who() + error); });
}

} // namespace ring_detail

caf::actor spawn_ring_worker(caf::actor_system& sys, worker_config cfg) {
  if (cfg.vclock) // one event at a time on the simulation's scheduler: no thread of its own
    return sys.spawn(ring_detail::ring_worker_behavior, std::move(cfg));
  return sys.spawn<caf::detached>(ring_detail::ring_worker_behavior, std::move(cfg));
}

} // namespace gradwire::actors
