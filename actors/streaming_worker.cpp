/// @file streaming_worker.cpp
/// Streaming DiLoCo's worker (Douillard et al. 2025; ps_options::streaming):
/// local SGD or DiLoCo whose parameters are exchanged fragment by
/// fragment, each fragment a shard. After its step s (counted from 1)
/// the worker
///   1. pulls each fragment pushed sync_delay steps ago, and merges its new
///      global values into the replica (x = g + alpha (x - g));
///   2. pushes each fragment due at s: s = offset_p + k H, offset_p =
///      floor(H (p + 1) / F), so the exchanges are staggered over the round;
///   3. with sync_delay 0, pulls what it just pushed.
/// The last step syncs every fragment, so the shards end with every
/// worker's progress, as DiLoCo's last round does. A sync shard averages
/// each fragment's pushes in rank order, so the run is the same bits
/// whatever order they arrive in. With one fragment and no delay this is
/// DiLoCo's schedule, step for step.

#include "actors/worker.hpp"
#include "actors/worker_protocol.hpp"

#include "kernels/error.hpp"
#include "kernels/host_vector.hpp"

#include <cstring>

namespace gradwire::actors {
namespace {

struct streaming_state : worker_core {
  std::vector<slice> base;           ///< by shard: its global values at the last pull
  std::vector<std::int64_t> pushes;  ///< by fragment: pushes made (the version its next pull waits for)
  std::vector<std::int64_t> pushed_at; ///< by fragment: the step of the push not yet pulled, or -1
  std::vector<models::compressor> squeeze; ///< compression.kind: one per shard
  std::size_t pending = 0;           ///< pulls awaited before the step ends
  bool started = false;              ///< the first pulls are in
  int generation = 0;                ///< the last reform taken (a lost worker's data shared out)
  static inline const char* name = "streaming_worker";
};

using streaming_actor = caf::stateful_actor<streaming_state>;

void begin_step(streaming_actor* self);
void after_pulls(streaming_actor* self);

/// Fragments, and the shards each is spread over (fragment p's are
/// p x pieces ... p x pieces + pieces - 1).
std::size_t fragments(const streaming_state& st) { return static_cast<std::size_t>(st.cfg.ps.fragments); }
std::size_t pieces(const streaming_state& st) { return st.cfg.ps.ranges.size() / fragments(st); }
std::int64_t done_steps(const streaming_state& st) { return st.step + 1; }
bool last_step(const streaming_state& st) { return done_steps(st) >= st.cfg.steps; }

/// Whether fragment p's push falls on step s (counted from 1).
bool push_due(const streaming_state& st, std::size_t p, std::int64_t s) {
  const std::int64_t off = st.cfg.ps.fragment_offset(static_cast<int>(p));
  return s >= off && (s - off) % st.cfg.ps.local_steps == 0;
}

/// Shard i's new global values into the replica, merged with its own
/// progress; they are the base of its next pseudo-gradient.
bool take_fragment(streaming_actor* self, std::size_t i, const slice& global) {
  auto& st = self->state;
  const auto [b, e] = st.cfg.ps.ranges[i];
  if (static_cast<std::size_t>(global.numel()) != e - b) {
    st.finish(self, st.who() + "shard " + std::to_string(i) + " of fragment " + std::to_string(i / pieces(st)) +
                      " came back with " + std::to_string(global.numel()) + " values for " + std::to_string(e - b));
    return false;
  }
  const float alpha = st.started ? st.cfg.ps.merge_alpha : 0.f; // the first pull is the start
  kernels::pull_toward(e - b, alpha, global.data(), st.model->params().data() + b);
  st.base[i] = global; // read-only from here on, shared with the shard's reply
  st.pushed_at[i / pieces(st)] = -1;
  return true;
}

/// Pulls shard i at the version its fragment's pushes so far make; `then`
/// once every pull of the batch is in.
void pull(streaming_actor* self, std::size_t i, void (*then)(streaming_actor*)) {
  auto& st = self->state;
  auto failed = [self, i](caf::error& err) {
    self->state.finish(self, self->state.who() + "no values of fragment " + std::to_string(i / pieces(self->state)) +
                               " from shard " + std::to_string(i) + " (" + self->system().render(err) + ")");
  };
  const auto ticket = st.requests.open(failed);
  self->request(st.cfg.ps.handles[i], st.request_timeout(), pull_atom::value, st.cfg.rank, st.pushes[i / pieces(st)],
                std::int64_t{0})
    .then(
      [=](std::int64_t, slice global, double held) {
        auto& s = self->state;
        if (!s.requests.close(ticket))
          return;
        s.report.bytes_received += static_cast<std::int64_t>(global.bytes());
        s.add_wait(held);
        if (take_fragment(self, i, global) && --s.pending == 0)
          then(self);
      },
      [=](caf::error& err) {
        if (self->state.requests.close(ticket))
          failed(err);
      });
}

/// Pulls every shard of each fragment `which` picks; `then` at once when none.
template <class Which>
void pull_where(streaming_actor* self, Which which, void (*then)(streaming_actor*)) {
  auto& st = self->state;
  std::vector<std::size_t> due;
  for (std::size_t p = 0; p < fragments(st); ++p)
    if (which(p))
      for (std::size_t q = 0; q < pieces(st); ++q)
        due.push_back(p * pieces(st) + q);
  st.pending = due.size();
  if (due.empty()) {
    then(self);
    return;
  }
  for (auto i : due)
    pull(self, i, then);
  st.await_mail(self);
}

/// What shard i is sent: its range's parameters (the shard averages them),
/// or, compressed, its pseudo-gradient (base - x) as a payload.
slice outgoing(streaming_state& st, std::size_t i) {
  const auto [b, e] = st.cfg.ps.ranges[i];
  auto out = slice::empty({static_cast<std::int64_t>(e - b)});
  std::memcpy(out.data(), st.model->params().data() + b, (e - b) * sizeof(float));
  if (st.squeeze.empty())
    return out;
  kernels::subtract_from(e - b, st.base[i].data(), out.data());
  const auto words = st.squeeze[i].encode(out.data(), st.step, st.cfg.rank);
  auto payload = slice::empty({static_cast<std::int64_t>(words.size())});
  std::memcpy(payload.data(), words.data(), words.size() * sizeof(std::uint32_t));
  return payload;
}

/// Fragment p's shards, each sent its range.
void push(streaming_actor* self, std::size_t p) {
  auto& st = self->state;
  models::compress_energy energy;
  for (std::size_t i = p * pieces(st); i < (p + 1) * pieces(st); ++i) {
    auto failed = [self, p, i](caf::error& err) {
      self->state.finish(self, self->state.who() + "push of fragment " + std::to_string(p) + " to shard " +
                                 std::to_string(i) + " failed: " + self->system().render(err));
    };
    const auto ticket = st.requests.open(failed);
    auto sent = outgoing(st, i);
    if (!st.squeeze.empty())
      energy += st.squeeze[i].last_energy();
    st.report.bytes_sent += static_cast<std::int64_t>(sent.bytes());
    self->request(st.cfg.ps.handles[i], st.request_timeout(), push_atom::value, st.cfg.rank, st.pushes[p], st.step,
                  static_cast<std::int64_t>(st.bt.size), std::move(sent))
      .then([=](std::int64_t, std::int64_t) { self->state.requests.close(ticket); },
            [=](caf::error& err) {
              if (self->state.requests.close(ticket))
                failed(err);
            });
  }
  if (!st.squeeze.empty())
    st.add_compression(energy);
  ++st.pushes[p];
  st.pushed_at[p] = done_steps(st);
}

void next_step(streaming_actor* self) {
  auto& st = self->state;
  st.end_step(self);
  if (st.step >= st.cfg.steps)
    st.finish(self);
  else
    self->send(as_worker(self), tick_atom::value);
}

/// Step 2 and 3 of the step's exchange: the pushes due, then (no delay, or
/// the last step) their pulls.
void after_pulls(streaming_actor* self) {
  auto& st = self->state;
  const auto s = done_steps(st);
  const bool last = last_step(st);
  for (std::size_t p = 0; p < fragments(st); ++p)
    if (st.pushed_at[p] < 0 && (push_due(st, p, s) || last))
      push(self, p);
  if (st.cfg.ps.sync_delay > 0 && !last) {
    next_step(self);
    return;
  }
  pull_where(self, [&st, s](std::size_t p) { return st.pushed_at[p] == s; }, next_step);
}

/// After the step's batch: the inner optimizer, then the exchange.
void after_compute(streaming_actor* self) {
  auto& st = self->state;
  const auto t0 = st.now();
  st.trainer->apply();
  st.add_compute(t0);
  st.begin_comm();
  const auto s = done_steps(st);
  const bool last = last_step(st);
  const auto delay = st.cfg.ps.sync_delay;
  pull_where(
    self, [&st, s, last, delay](std::size_t p) { return st.pushed_at[p] >= 0 && (s - st.pushed_at[p] >= delay || last); },
    after_pulls);
}

void begin_step(streaming_actor* self) {
  auto& st = self->state;
  if (st.step >= st.cfg.steps) {
    st.finish(self);
    return;
  }
  if (st.hold(self))
    return;
  if (!st.started) { // every fragment's starting values
    pull_where(self, [](std::size_t) { return true; }, [](streaming_actor* s) {
      s->state.started = true;
      begin_step(s);
    });
    return;
  }
  try {
    if (st.offloads()) {
      st.compute_offloaded([self] { after_compute(self); });
      return;
    }
    if (!st.compute(self))
      return; // a stop between two layers: held at the step before
  } catch (const gradwire::error& ex) {
    st.finish(self, ex.what());
    return;
  }
  after_compute(self);
}

/// The fragments' state; compression.kind: a compressor per shard.
void init_fragments(streaming_state& st) {
  const auto n = fragments(st);
  check(!st.cfg.resume, "streaming DiLoCo does not resume from a checkpoint");
  check(n >= 1 && st.cfg.ps.ranges.size() % n == 0 && st.cfg.ps.ranges.size() == st.cfg.ps.handles.size(),
        "streaming: " + std::to_string(st.cfg.ps.ranges.size()) + " shard ranges for " + std::to_string(n) +
          " fragments");
  st.base.assign(st.cfg.ps.ranges.size(), slice{});
  st.pushes.assign(n, 0);
  st.pushed_at.assign(n, -1);
  if (st.cfg.compress.mode == models::compress_mode::none)
    return;
  for (std::size_t i = 0; i < st.cfg.ps.ranges.size(); ++i) {
    auto spec = st.cfg.compress;
    spec.seed = st.cfg.seed + 7919ULL * i;
    st.squeeze.emplace_back(spec, st.cfg.ps.ranges[i].second - st.cfg.ps.ranges[i].first);
  }
}

caf::behavior streaming_behavior(streaming_actor* self, worker_config cfg) {
  auto& st = self->state;
  if (worker_core::offloads(cfg))
    start_worker_offloaded(self, std::move(cfg), [&st] { init_fragments(st); });
  else if (!start_worker(self, std::move(cfg), [&st] { init_fragments(st); }))
    return {};
  self->send(as_worker(self), tick_atom::value);
  st.start_heartbeats(self);
  return behavior_with_controls<streaming_worker_actor>(
    self, [=] { self->state.finish(self, {}, false); }, [=] { begin_step(self); },
    [=](beat_atom) { self->state.on_beat(self); },
    [=](reform_atom, int generation, std::vector<std::int64_t> survivors) {
      // A worker was lost (across processes): the shards complete their
      // versions with the survivors, who share out its data.
      self->state.reshard_among(self->state.generation, generation, survivors);
    });
}

} // namespace

caf::actor spawn_streaming_worker(caf::actor_system& sys, worker_config cfg) {
  if (cfg.vclock)
    return sys.spawn(streaming_behavior, std::move(cfg));
  return sys.spawn<caf::detached>(streaming_behavior, std::move(cfg));
}

} // namespace gradwire::actors
