/// @file compressed_worker.cpp
/// A data-parallel worker whose gradient travels compressed
/// (compression.kind, models/compress.hpp). Compressed payloads do not
/// add up element by element (top-k's indices differ from worker to
/// worker), so instead of a reduce-scatter each worker sends its payload
/// to every other one (an all-gather: (n - 1) payloads out and in, the
/// bytes a ring all-gather moves) and every worker decodes all n in rank
/// order. So each replica applies the same mean, bit for bit, at any
/// process count. PowerSGD's factors do add up element by element: its
/// two sums a step (P, then Q) go through a ring allreduce of the workers
/// (ring_allreduce.hpp, tags 0 and 1), 2 (n - 1) / n of a payload out and
/// in instead of the all-gather's n - 1. The ring sums each chunk in the
/// order of the ring's positions and its owner passes one result round,
/// so every replica gets the same bits there too.

#include "actors/ring_allreduce.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/worker.hpp"
#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "kernels/log.hpp"
#include "models/model.hpp"

#include <cstring>
#include <map>

namespace gradwire::actors {

namespace {

struct compressed_state : worker_core {
  std::vector<caf::actor> workers; ///< by rank, from (wire_atom, right, all)
  std::unique_ptr<models::compressor> one;  ///< bf16, topk, randk, sign
  std::unique_ptr<models::powersgd> power;  ///< powersgd
  /// Payloads by (step, phase), by rank; a peer may be one round ahead.
  std::map<std::pair<std::int64_t, int>, std::vector<slice>> rounds;
  int phase = 0;
  bool in_round = false;
  clock_type::time_point round_start;
  std::vector<float> mean; ///< the decoded mean gradient (1-bit Adam: momentum)
  std::vector<float> momentum; ///< compress.momentum: this worker's Adam momentum, sent
  std::vector<float> own_step; ///< compress.update: the change this worker's own optimizer step makes, sent
  /// PowerSGD: the ring allreduce of P (index 0) and of Q (1).
  std::vector<std::unique_ptr<ring_allreduce>> factor_rings;
  /// compression.warmup: the ring allreduce of the dense gradient
  /// (tag 2) for the first steps, in the dense ring's buckets, and the
  /// buckets summed so far this step.
  std::unique_ptr<ring_allreduce> dense_ring;
  std::vector<std::pair<std::size_t, std::size_t>> dense_buckets;
  std::size_t dense_done = 0;

  static inline const char* name = "compressed_worker";
};

using compressed_actor = caf::stateful_actor<compressed_state>;

slice slice_of(const std::vector<std::uint32_t>& words) {
  auto s = slice::empty({static_cast<std::int64_t>(words.size())});
  std::memcpy(s.data(), words.data(), words.size() * sizeof(std::uint32_t));
  return s;
}

slice slice_of(const std::vector<float>& v) {
  auto s = slice::empty({static_cast<std::int64_t>(v.size())});
  std::memcpy(s.data(), v.data(), v.size() * sizeof(float));
  return s;
}

void send_phase(compressed_actor* self, slice payload) {
  auto& st = self->state;
  const auto n = static_cast<std::size_t>(st.cfg.world);
  for (std::size_t r = 0; r < n; ++r)
    if (static_cast<int>(r) != st.cfg.rank)
      self->send(as_compressed_worker(st.workers[r]), gather_atom::value, st.step, st.phase, st.cfg.rank, payload);
  st.report.bytes_sent += static_cast<std::int64_t>(payload.bytes() * (n - 1));
  auto& got = st.rounds[{st.step, st.phase}];
  got.resize(n);
  got[static_cast<std::size_t>(st.cfg.rank)] = std::move(payload);
}

void try_complete(compressed_actor* self);

/// compress.update: the change this worker's own optimizer step would make
/// to the parameters, from its own gradient and its own optimizer state.
const float* own_step(compressed_state& st, const float* g) {
  const std::size_t n = st.own_step.size();
  const float* w = st.model->params().data();
  std::memcpy(st.own_step.data(), w, n * sizeof(float));
  auto& opt = st.trainer->optim();
  opt.begin_step();
  opt.update(st.own_step.data(), g, 0, n);
  kernels::backend_for(kernels::device::cpu()).axpy(n, -1.f, w, st.own_step.data()); // its step: new - old
  return st.own_step.data();
}

void begin_step(compressed_actor* self) {
  auto& st = self->state;
  if (st.step >= st.cfg.steps) {
    st.finish(self, {}, true);
    return;
  }
  if (st.hold(self))
    return;
  try {
    if (!st.compute(self))
      return; // a stop between two layers: held at the step before
    st.in_round = true;
    st.round_start = st.now();
    st.phase = 0;
    const float* g = st.trainer->gradients().data();
    if (st.cfg.compress.update)
      g = own_step(st, g);
    if (st.step < st.cfg.compress.warmup) { // dense, the gradient's copy summed in place round the ring
      auto copy = slice::empty({static_cast<std::int64_t>(st.mean.size())});
      std::memcpy(copy.data(), g, copy.bytes());
      st.dense_done = 0;
      for (std::size_t b = 0; b < st.dense_buckets.size(); ++b) {
        const auto [lo, hi] = st.dense_buckets[b];
        st.dense_ring->start(self, st.step, static_cast<int>(b), copy.view(lo, {static_cast<std::int64_t>(hi - lo)}),
                             1.f / static_cast<float>(st.cfg.world));
      }
      return;
    }
    if (st.power) {
      st.factor_rings[0]->start(self, st.step, 0, slice_of(st.power->first_payload(g)), 1.f);
      return;
    }
    if (st.cfg.compress.momentum) { // 1-bit Adam: this worker's momentum goes, its gradient folded in
      st.trainer->optim().momentum_after(st.model->params().data(), g, st.momentum.data(), st.momentum.size());
      g = st.momentum.data();
    }
    send_phase(self, slice_of(st.one->encode(g, st.step, st.cfg.rank)));
    st.add_compression(st.one->last_energy());
    try_complete(self);
  } catch (const gradwire::error& e) {
    st.finish(self, st.who() + e.what());
  }
}

/// The step's mean gradient applied; the next step follows.
void apply_mean(compressed_actor* self) {
  auto& st = self->state;
  st.in_round = false;
  st.end_comm();
  const auto t0 = st.now();
  if (st.cfg.compress.update) { // the mean is the workers' steps
    kernels::backend_for(kernels::device::cpu()).axpy(st.mean.size(), 1.f, st.mean.data(), st.model->params().data());
  } else if (st.cfg.compress.momentum && st.step >= st.cfg.compress.warmup)
    st.trainer->apply_momentum(st.mean.data()); // the mean is the workers' momentum
  else
    st.trainer->apply(st.mean.data());
  st.add_compute(t0);
  st.begin_comm();
  st.end_step(self);
  self->send(as_worker(self), tick_atom::value);
}

/// PowerSGD: the ring's sum of P (phase 0: Q sent round next) or of Q
/// (phase 1: the mean decoded and applied).
void factor_summed(compressed_actor* self, int phase, ring_allreduce::done_info d) {
  auto& st = self->state;
  auto& ring = *st.factor_rings[static_cast<std::size_t>(phase)];
  const auto [sent, received] = ring.take_bytes();
  st.report.bytes_sent += sent;
  st.report.bytes_received += received;
  std::vector<float> sum(phase == 0 ? st.power->first_floats() : st.power->second_floats());
  for (const auto& p : d.result) // the ring's pieces cover [0, sum.size()) once
    std::memcpy(sum.data() + p.offset, p.data.data(), p.data.bytes());
  if (phase == 0) {
    st.phase = 1;
    st.factor_rings[1]->start(self, st.step, 0, slice_of(st.power->second_payload(sum)), 1.f);
    return;
  }
  st.power->finish(sum, 1.f / static_cast<float>(st.cfg.world), st.mean.data()); // writes every element
  st.add_compression(st.power->last_energy());
  apply_mean(self);
}

/// compression.warmup: the dense mean gradient, applied.
void dense_summed(compressed_actor* self, ring_allreduce::done_info d) {
  auto& st = self->state;
  const auto [sent, received] = st.dense_ring->take_bytes();
  st.report.bytes_sent += sent;
  st.report.bytes_received += received;
  for (const auto& p : d.result) // the ring's pieces cover the bucket once
    std::memcpy(st.mean.data() + p.offset, p.data.data(), p.data.bytes());
  if (++st.dense_done == st.dense_buckets.size())
    apply_mean(self);
}

/// The round's payloads decoded, their mean into st.mean.
void decode_round(compressed_actor* self, const std::vector<slice>& got) {
  auto& st = self->state;
  const float scale = 1.f / static_cast<float>(got.size());
  std::fill(st.mean.begin(), st.mean.end(), 0.f);
  std::vector<std::uint32_t> words;
  for (std::size_t r = 0; r < got.size(); ++r) {
    words.resize(static_cast<std::size_t>(got[r].numel()));
    std::memcpy(words.data(), got[r].data(), words.size() * sizeof(std::uint32_t));
    try {
      st.one->accumulate(words.data(), words.size(), scale, st.mean.data());
    } catch (const gradwire::error& e) {
      throw error("rank " + std::to_string(r) + " sent " + e.what());
    }
  }
}

void try_complete(compressed_actor* self) {
  auto& st = self->state;
  if (!st.in_round)
    return;
  const auto it = st.rounds.find({st.step, 0});
  if (it == st.rounds.end() || it->second.size() != static_cast<std::size_t>(st.cfg.world))
    return;
  for (const auto& p : it->second)
    if (!p.defined())
      return;
  const auto got = std::move(it->second);
  st.rounds.erase(it);
  decode_round(self, got);
  apply_mean(self);
}

/// A peer's payload: checked against the protocol before it is kept.
void on_gather(compressed_actor* self, std::int64_t step, int phase, int rank, slice payload) {
  auto& st = self->state;
  try {
    const int n = st.cfg.world; // (a peer wired before this worker may send before its handles come)
    check(rank >= 0 && rank < n && rank != st.cfg.rank, "a payload from rank " + std::to_string(rank));
    const std::string from = "rank " + std::to_string(rank) + ": ";
    check(!st.power && phase == 0, from + "a payload of phase " + std::to_string(phase) +
                                     (st.power ? " (PowerSGD's factors go round the ring)" : ""));
    check(step >= st.step && step <= st.step + 1, from + "a payload of step " + std::to_string(step) +
                                                    " at step " + std::to_string(st.step));
    check(payload.defined(), from + "an empty payload");
    auto& got = st.rounds[{step, phase}];
    got.resize(static_cast<std::size_t>(n));
    check(!got[static_cast<std::size_t>(rank)].defined(), from + "a second payload for step " + std::to_string(step));
    st.report.bytes_received += static_cast<std::int64_t>(payload.bytes());
    got[static_cast<std::size_t>(rank)] = std::move(payload);
    try_complete(self);
  } catch (const gradwire::error& e) {
    st.finish(self, st.who() + e.what());
  }
}

/// Throws when a resumed worker's residual (or PowerSGD's Q) does not fit.
void restore_compression(compressed_state& st) {
  const auto& s = *st.cfg.resume;
  const auto take = [&](const std::string& name, std::vector<float>& into) {
    const auto& v = s.f(name);
    check(v.size() == into.size(), s.who + ": '" + name + "' holds " + std::to_string(v.size()) + " floats, this run " +
                                     std::to_string(into.size()));
    into = v;
  };
  take("compress_residual", st.power ? st.power->residual() : st.one->residual());
  if (st.power)
    take("powersgd_q", st.power->q());
}

void init_compression(compressed_actor* self) {
  auto& st = self->state;
  const auto n = st.model->size();
  auto spec = st.cfg.compress;
  spec.seed = st.cfg.seed;
  if (spec.mode == models::compress_mode::powersgd) {
    st.power = std::make_unique<models::powersgd>(spec, models::matrix_blocks(models::layout_of(st.cfg.spec), n), n);
    for (int phase = 0; phase < 2; ++phase) {
      const auto len = phase == 0 ? st.power->first_floats() : st.power->second_floats();
      auto ring = std::make_unique<ring_allreduce>(
        st.cfg.rank, st.cfg.world, phase, std::vector<std::pair<std::size_t, std::size_t>>{{0, len}},
        st.cfg.ring.chunk_floats, [self, phase](ring_allreduce::done_info d) { factor_summed(self, phase, std::move(d)); });
      ring->set_clock(st.cfg.vclock.get());
      st.factor_rings.push_back(std::move(ring));
    }
  } else
    st.one = std::make_unique<models::compressor>(spec, n);
  st.mean.assign(n, 0.f);
  if (spec.momentum)
    st.momentum.assign(n, 0.f);
  if (spec.update)
    st.own_step.assign(n, 0.f);
  if (spec.warmup > 0) {
    st.dense_buckets = st.cfg.ring.buckets.empty() ? make_buckets(n, st.cfg.ring.bucket_floats_for(false)) : st.cfg.ring.buckets;
    st.dense_ring = std::make_unique<ring_allreduce>(
      st.cfg.rank, st.cfg.world, 2, st.dense_buckets, st.cfg.ring.chunk_floats,
      [self](ring_allreduce::done_info d) { dense_summed(self, std::move(d)); });
    st.dense_ring->set_clock(st.cfg.vclock.get());
  }
  if (st.cfg.resume)
    restore_compression(st);
  st.save_extra = [self](snapshot& s) {
    auto& c = self->state;
    s.put("compress_residual", c.power ? c.power->residual() : c.one->residual());
    if (c.power)
      s.put("powersgd_q", c.power->q());
  };
}

/// A chunk of PowerSGD's ring (tag: 0 for P, 1 for Q).
void on_factor_chunk(compressed_actor* self, int tag, std::int64_t round, int bucket, int chunk, int hop, slice data) {
  auto& st = self->state;
  try {
    if (tag == 2 && st.dense_ring) {
      st.dense_ring->on_chunk(self, round, bucket, chunk, hop, std::move(data));
      return;
    }
    check(st.power && (tag == 0 || tag == 1), "a ring chunk of tag " + std::to_string(tag) +
                                                " (only PowerSGD's factors and the warm-up's gradients go round the ring)");
    st.factor_rings[static_cast<std::size_t>(tag)]->on_chunk(self, round, bucket, chunk, hop, std::move(data));
  } catch (const gradwire::error& e) {
    st.finish(self, st.who() + e.what());
  }
}

void on_beat(compressed_actor* self) {
  auto& st = self->state;
  if (st.in_round && st.overdue(st.round_start) && st.step < st.cfg.compress.warmup) {
    st.finish(self, st.who() + "the dense sum at step " + std::to_string(st.step) + " incomplete after " +
                      std::to_string(st.cfg.request_timeout.count()) + " ms: " + st.dense_ring->pending());
    return;
  }
  if (st.in_round && st.overdue(st.round_start) && st.power) {
    st.finish(self, st.who() + "PowerSGD's sum of " + (st.phase == 0 ? "P" : "Q") + " at step " +
                      std::to_string(st.step) + " incomplete after " + std::to_string(st.cfg.request_timeout.count()) +
                      " ms: " + st.factor_rings[static_cast<std::size_t>(st.phase)]->pending());
    return;
  }
  if (st.in_round && st.overdue(st.round_start)) {
    std::string missing;
    const auto it = st.rounds.find({st.step, st.phase});
    for (std::size_t r = 0; r < static_cast<std::size_t>(st.cfg.world); ++r)
      if (it == st.rounds.end() || r >= it->second.size() || !it->second[r].defined())
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    st.finish(self, st.who() + "compressed exchange of step " + std::to_string(st.step) + " incomplete after " +
                      std::to_string(st.cfg.request_timeout.count()) + " ms: no payload from rank(s) " + missing);
    return;
  }
  st.on_beat(self);
}

caf::behavior compressed_behavior(compressed_actor* self, worker_config cfg) {
  auto& st = self->state;
  if (!start_worker(self, std::move(cfg), [self] { init_compression(self); }))
    return {};
  st.start_heartbeats(self);
  return behavior_with_controls<compressed_worker_actor>(
    self, [=] { self->state.finish(self, {}, true); }, [=] { begin_step(self); },
    [=](wire_atom, const caf::actor& right, std::vector<caf::actor> all) {
      auto& s = self->state;
      if (all.size() != static_cast<std::size_t>(s.cfg.world)) {
        s.finish(self, s.who() + "a compressed exchange needs every worker's handle, got " +
                         std::to_string(all.size()) + " for " + std::to_string(s.cfg.world));
        return;
      }
      s.workers = std::move(all);
      for (auto& ring : s.factor_rings)
        ring->set_right(right);
      if (s.dense_ring)
        s.dense_ring->set_right(right);
      begin_step(self);
    },
    [=](gather_atom, std::int64_t step, int phase, int rank, slice payload) {
      on_gather(self, step, phase, rank, std::move(payload));
    },
    [=](ring_atom, int tag, std::int64_t round, int bucket, int chunk, int hop, slice data) {
      on_factor_chunk(self, tag, round, bucket, chunk, hop, std::move(data));
    },
    [=](beat_atom) { on_beat(self); });
}

} // namespace

caf::actor spawn_compressed_worker(caf::actor_system& sys, worker_config cfg) {
  if (cfg.vclock)
    return sys.spawn(compressed_behavior, std::move(cfg));
  return sys.spawn<caf::detached>(compressed_behavior, std::move(cfg));
}

} // namespace gradwire::actors
