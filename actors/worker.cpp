#include "actors/worker.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/refuse.hpp"
#include "actors/worker_round.hpp"

#include "kernels/error.hpp"
#include "kernels/host_vector.hpp"
#include "kernels/log.hpp"

#include <algorithm>
#include <map>
#include <cstring>

namespace gradwire::actors {
namespace {

struct worker_state : worker_core {
  std::size_t pending = 0;
  /// Async, shards spread over ranks (cfg.shards_may_move): a shard whose
  /// rank is lost is rebuilt on rank 0 ((rebuilt_atom, index, shard)); its
  /// pulls wait for that here (true: the pull for that index, after a push
  /// and pull in one, continues as that did).
  std::map<std::size_t, bool> parked;
  std::vector<std::int64_t> base_version;
  /// Async DiLoCo: each shard's slice of the global parameters pulled at
  /// this round's start (its pseudo-gradient is these minus the replica's).
  std::vector<slice> base;
  /// compression.kind: one compressor per shard's range, each with its
  /// own residual (error feedback).
  std::vector<models::compressor> squeeze;
  int generation = 0; ///< the last reform taken (a lost worker's data shared out)
  /// Dynamic local steps (ps_options::dynamic): the step this worker's
  /// round began at, and the steps it takes.
  std::int64_t round_start = 0, round_len = 0;
  /// What its steps pull and push, and when (worker_round.hpp).
  std::unique_ptr<worker_round> round;
  round_clock clock() const { return {step, cfg.steps, round_start, round_len}; }
  static inline const char* name = "worker";
};

using worker_actor = caf::stateful_actor<worker_state>;

void begin_step(worker_actor* self);

/// Shard i's slice of the parameters, at `version`, into the replica;
/// false (and the worker stopped with the error) when it has the wrong size.
bool take_params(worker_actor* self, std::size_t i, std::int64_t version, const slice& params) {
  auto& st = self->state;
  const auto [b, e] = st.cfg.ps.ranges[i];
  if (static_cast<std::size_t>(params.numel()) != e - b) {
    st.finish(self, st.who() + "shard " + std::to_string(i) + " sent " + std::to_string(params.numel()) +
                      " parameters for its slice of " + std::to_string(e - b));
    return false;
  }
  if (st.round->pushes_pseudo())
    st.base[i] = params; // read-only from here on, shared with the shard's reply
  if (st.offloads()) // copied in with the next batch, on its thread
    st.incoming.emplace_back(b, params);
  else
    std::memcpy(st.model->params().data() + b, params.data(), (e - b) * sizeof(float));
  st.base_version[i] = version;
  return true;
}

void compute_and_push(worker_actor* self);

/// A push and pull in one came back from one more shard: after the last,
/// the next step runs on those parameters (no pull).
void after_push_pull(worker_actor* self) {
  auto& s = self->state;
  if (--s.pending > 0)
    return;
  s.end_step(self);
  if (s.step >= s.cfg.steps) {
    s.finish(self);
    return;
  }
  if (!s.hold(self))
    compute_and_push(self);
}

void pull_from(worker_actor* self, std::size_t i, bool after_push);

/// A push to shard i failed. Where shards may move (an async parameter
/// server that rebuilds a lost rank's shards), the gradient is lost with
/// it and the pull waits for the rebuilt shard; else the worker fails.
void push_failed(worker_actor* self, std::size_t i, const shard_actor& target, bool with_pull, caf::error& err) {
  auto& s = self->state;
  if (!s.cfg.ps.may_move) {
    s.finish(self, s.who() + "push to shard " + std::to_string(i) + " failed: " + error_text(self->system(), err));
    return;
  }
  ++s.report.dropped;
  if (with_pull && s.cfg.ps.handles[i] != target) // rebuilt already
    pull_from(self, i, true);
  else if (with_pull)
    s.parked[i] = true;
  else if (--s.pending == 0) {
    s.end_step(self);
    begin_step(self);
  }
}

/// One more reply to a push came in: the step ends once every shard (and,
/// with dynamic local steps, shard 0's answer to the pace) has answered.
void reply_in(worker_actor* self, bool with_pull) {
  auto& s = self->state;
  if (with_pull) {
    after_push_pull(self);
    return;
  }
  if (--s.pending == 0) {
    s.end_step(self);
    begin_step(self);
  }
}

/// A push's reply: its staleness (-1: dropped, a backup worker's push came
/// too late).
void push_taken(worker_actor* self, std::int64_t staleness) {
  auto& s = self->state;
  if (staleness == -1)
    ++s.report.dropped;
  else if (staleness >= 0)
    s.add_staleness(staleness);
  reply_in(self, false);
}

/// Pushes `grad` to shard i, with the next pull in the same round trip
/// where `with_pull`.
void push_to(worker_actor* self, std::size_t i, slice grad, bool with_pull) {
  auto& st = self->state;
  const shard_actor target = st.cfg.ps.handles[i];
  auto failed = [=](caf::error& err) { push_failed(self, i, target, with_pull, err); };
  const auto ticket = st.requests.open(failed);
  auto given_up = [=](caf::error& err) {
    if (self->state.requests.close(ticket))
      failed(err);
  };
  const auto samples = static_cast<std::int64_t>(st.bt.size);
  st.report.bytes_sent += static_cast<std::int64_t>(grad.bytes());
  if (with_pull) {
    self->request(target, st.request_timeout(), push_pull_atom::value, st.cfg.rank, st.base_version[i], st.step,
                  samples, grad)
      .then(
        [=](std::int64_t staleness, std::int64_t version, slice params) {
          if (!self->state.requests.close(ticket))
            return; // given up already
          self->state.add_staleness(staleness);
          self->state.report.bytes_received += static_cast<std::int64_t>(params.bytes());
          if (take_params(self, i, version, params))
            after_push_pull(self);
        },
        given_up);
    return;
  }
  self->request(target, st.request_timeout(), push_atom::value, st.cfg.rank, st.base_version[i], st.step, samples,
                grad)
    .then(
      [=](std::int64_t staleness, std::int64_t) {
        if (self->state.requests.close(ticket)) // (else given up already)
          push_taken(self, staleness);
      },
      given_up);
}

/// The gradient's slices, one per shard, for its pushes (handed over, never
/// written again once sent).
std::vector<slice> gradient_slices(const worker_state& st) {
  std::vector<slice> out;
  for (const auto& [b, e] : st.cfg.ps.ranges)
    out.push_back(slice::empty({static_cast<std::int64_t>(e - b)}));
  return out;
}

/// Async DiLoCo: the replica's slices in `grads` become the round's
/// pseudo-gradients, the global parameters pulled at its start minus them.
void to_pseudo_gradients(const worker_state& st, std::vector<slice>& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i)
    kernels::subtract_from(static_cast<std::size_t>(grads[i].numel()), st.base[i].data(), grads[i].data());
}

/// compression.kind: each slice replaced by its compressed payload (a
/// slice of 32-bit words), the residuals kept.
void compress_all(worker_state& st, std::vector<slice>& grads) {
  models::compress_energy energy;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const auto words = st.squeeze[i].encode(grads[i].data(), st.step, st.cfg.rank);
    energy += st.squeeze[i].last_energy();
    auto payload = slice::empty({static_cast<std::int64_t>(words.size())});
    std::memcpy(payload.data(), words.data(), words.size() * sizeof(std::uint32_t));
    grads[i] = std::move(payload);
  }
  st.add_compression(energy);
}

/// Fills `grads` (gradient_slices) with what this step pushes from `from`
/// (the gradient, or local SGD's parameters): as they are, as
/// pseudo-gradients, compressed.
void fill_pushes(worker_state& st, const float* from, std::vector<slice>& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i)
    std::memcpy(grads[i].data(), from + st.cfg.ps.ranges[i].first, grads[i].bytes());
  if (st.round->pushes_pseudo())
    to_pseudo_gradients(st, grads);
  if (!st.squeeze.empty())
    compress_all(st, grads);
}

/// The pace of the round ending with this step: the lower median of its
/// steps' compute seconds, so that a step held up once (the first one's
/// set-up, a preemption) does not make a worker look slow.
double round_pace(const worker_state& st) {
  const auto& ms = st.report.step_compute_ms; // the steps before this one
  const auto before = std::min<std::size_t>(static_cast<std::size_t>(st.step - st.round_start), ms.size());
  std::vector<double> secs;
  for (std::size_t k = ms.size() - before; k < ms.size(); ++k)
    secs.push_back(ms[k] * 1e-3);
  secs.push_back(st.report.compute_seconds - st.compute_at_step_start);
  const auto mid = secs.begin() + static_cast<std::ptrdiff_t>((secs.size() - 1) / 2);
  std::nth_element(secs.begin(), mid, secs.end());
  return *mid;
}

/// Dynamic local steps, at a round's end: the round's pace to shard 0,
/// whose answer is the next round's length (one more reply to wait for).
void send_pace(worker_actor* self, bool with_pull) {
  auto& st = self->state;
  const double pace = round_pace(st);
  st.round_start = st.step + 1;
  ++st.pending;
  auto failed = [=](caf::error& err) { // shard 0 lost or slow: the next round keeps this one's length
    log::warn("{}no round length from shard 0 ({}); keeping {} steps", self->state.who(), self->system().render(err),
              self->state.round_len);
    reply_in(self, with_pull);
  };
  const auto ticket = st.requests.open(failed);
  self->request(st.cfg.ps.handles[0], st.request_timeout(), pace_atom::value, st.cfg.rank, st.step, pace)
    .then(
      [=](std::int64_t len) {
        auto& s = self->state;
        if (!s.requests.close(ticket))
          return; // given up already
        s.round_len = std::clamp<std::int64_t>(len, 1, s.round->local_steps()); // a shard's word, bounded
        reply_in(self, with_pull);
      },
      [=](caf::error& err) {
        if (self->state.requests.close(ticket))
          failed(err);
      });
}

/// After a batch: the local optimizer step (local SGD), then the parameters
/// (local SGD) or gradients go to every shard. `grads`: the gradient's
/// slices, filled already (with the offloaded batch), or empty.
void push_computed(worker_actor* self, std::vector<slice> grads) {
  auto& st = self->state;
  const bool local = st.round->local_steps() > 0;
  if (local) {
    const auto t0 = st.now();
    st.trainer->apply();
    st.add_compute(t0); // the local optimizer step is compute, as the ring's is
  }
  if (!st.round->ends(st.clock())) {
    st.end_step(self); // a local step: no exchange
    self->send(as_worker(self), tick_atom::value);
    return;
  }
  if (grads.empty()) {
    grads = gradient_slices(st);
    fill_pushes(st, local ? st.model->params().data() : st.trainer->gradients().data(), grads);
  }
  st.pending = st.cfg.ps.handles.size();
  const bool with_pull = st.round->push_pull(st.clock());
  for (std::size_t i = 0; i < st.cfg.ps.handles.size(); ++i)
    push_to(self, i, std::move(grads[i]), with_pull);
  if (st.round->sends_pace(st.clock()))
    send_pace(self, with_pull);
  st.await_mail(self); // the replies (cfg.spin_wait)
}

/// One batch, then push_computed. In virtual time the batch is offloaded,
/// with the copy of its gradient into the pushes.
void compute_and_push(worker_actor* self) {
  auto& st = self->state;
  try {
    if (st.offloads()) {
      auto grads = std::make_shared<std::vector<slice>>();
      std::function<void()> copy;
      if (st.round->local_steps() == 0) {
        *grads = gradient_slices(st);
        copy = [&st, grads] { fill_pushes(st, st.trainer->gradients().data(), *grads); };
      }
      st.compute_offloaded([self, grads] { push_computed(self, std::move(*grads)); }, std::move(copy));
      return;
    }
    if (!st.compute(self))
      return; // a stop between two layers: held at the step before
  } catch (const gradwire::error& ex) {
    st.finish(self, ex.what());
    return;
  }
  push_computed(self, {});
}

/// Shard i's slice for this step (after_push: the pull of a push and pull
/// in one whose shard was lost, which continues as that would have).
void pull_from(worker_actor* self, std::size_t i, bool after_push) {
  auto& st = self->state;
  const std::int64_t min_clock = st.round->min_clock(st.clock());
  const shard_actor target = st.cfg.ps.handles[i];
  auto failed = [=](caf::error& err) {
    auto& s = self->state;
    if (s.cfg.ps.may_move) { // its rank is lost: pull again from the shard rebuilt on rank 0
      if (s.cfg.ps.handles[i] != target)
        pull_from(self, i, after_push); // rebuilt already
      else
        s.parked[i] = after_push;
      return;
    }
    s.finish(self, s.who() + "no parameters from shard " + std::to_string(i) + " (" + self->system().render(err) + ")");
  };
  const auto ticket = st.requests.open(failed);
  self->request(target, st.request_timeout(), pull_atom::value, st.cfg.rank,
                st.round->wanted_version(st.clock(), st.base_version[i]), min_clock)
    .then(
      [=](std::int64_t version, slice params, double held) {
        auto& s = self->state;
        if (!s.requests.close(ticket))
          return; // given up already
        s.report.bytes_received += static_cast<std::int64_t>(params.bytes());
        if (!take_params(self, i, version, params))
          return;
        s.add_wait(held);
        if (after_push) {
          after_push_pull(self);
          return;
        }
        if (--s.pending > 0)
          return;
        // Backup workers: the run is as long as the shards' version count.
        if (s.round->ends_by_versions() &&
            *std::min_element(s.base_version.begin(), s.base_version.end()) >= s.cfg.steps) {
          s.finish(self);
          return;
        }
        compute_and_push(self);
      },
      [=](caf::error& err) {
        if (self->state.requests.close(ticket))
          failed(err);
      });
}

void begin_step(worker_actor* self) {
  auto& st = self->state;
  if (!st.round->ends_by_versions() && st.step >= st.cfg.steps) {
    st.finish(self);
    return;
  }
  if (st.hold(self))
    return;
  if (!st.round->begins(st.clock())) {
    st.begin_comm(); // no communication in this step
    compute_and_push(self); // inside a round: keep training the local replica
    return;
  }
  // The exchange runs from the end of the last computation (the pushes and
  // their replies) to the start of the next (the pulls): no begin_comm()
  // here, which would drop the pushes' round trip from comm_seconds.
  st.pending = st.cfg.ps.handles.size();
  for (std::size_t i = 0; i < st.cfg.ps.handles.size(); ++i)
    pull_from(self, i, false);
  st.await_mail(self); // the replies (cfg.spin_wait)
}

/// compression.kind: a compressor per shard's range (its own randk
/// draws), the residuals from a checkpoint, and into the next. Reads only
/// the configuration: virtual time builds the replica later.
void init_compression(worker_actor* self) {
  auto& st = self->state;
  if (st.cfg.compress.mode == models::compress_mode::none)
    return;
  std::size_t n = 0;
  for (std::size_t i = 0; i < st.cfg.ps.ranges.size(); ++i) {
    auto spec = st.cfg.compress;
    spec.seed = st.cfg.seed + 7919ULL * i;
    const auto [b, e] = st.cfg.ps.ranges[i];
    st.squeeze.emplace_back(spec, e - b);
    n += e - b;
  }
  if (st.cfg.resume) {
    const auto& s = *st.cfg.resume;
    const auto& v = s.f("compress_residual");
    check(v.size() == n, s.who + ": 'compress_residual' holds " + std::to_string(v.size()) + " floats, this run " +
                           std::to_string(n));
    auto at = v.begin();
    for (auto& c : st.squeeze) {
      std::copy(at, at + static_cast<std::ptrdiff_t>(c.size()), c.residual().begin());
      at += static_cast<std::ptrdiff_t>(c.size());
    }
  }
  st.save_extra = [self](snapshot& s) {
    std::vector<float> all;
    for (const auto& c : self->state.squeeze)
      all.insert(all.end(), c.residual().begin(), c.residual().end());
    s.put("compress_residual", std::move(all));
  };
}

caf::behavior worker_behavior(worker_actor* self, worker_config cfg) {
  auto& st = self->state;
  auto init_kind = [self] {
    auto& s = self->state;
    s.base_version.assign(s.cfg.ps.handles.size(), 0);
    s.base.assign(s.cfg.ps.handles.size(), slice{});
    s.round = make_worker_round(s.cfg.ps, s.cfg.compress.mode != models::compress_mode::none);
    s.round_start = s.step;
    s.round_len = s.round->local_steps();
    init_compression(self);
  };
  if (worker_core::offloads(cfg))
    start_worker_offloaded(self, std::move(cfg), init_kind);
  else if (!start_worker(self, std::move(cfg), init_kind))
    return {};
  self->send(as_worker(self), tick_atom::value);
  st.start_heartbeats(self);
  return behavior_with_controls<ps_worker_actor>(
    self, [=] { self->state.finish(self, {}, false); }, [=] { begin_step(self); },
    [=](beat_atom) { self->state.on_beat(self); },
    [=](replica_atom, std::int64_t) { // its replica, to rebuild lost shards from
      self->state.send_snapshot(self, self->state.cfg.report_to, worker_core::snapshot_for::replica);
    },
    [=](rebuilt_atom, int index, caf::actor shard) { // shard `index` rebuilt on rank 0: its rank was lost
      auto& s = self->state;
      if (!s.cfg.ps.may_move || index < 0 || static_cast<std::size_t>(index) >= s.cfg.ps.handles.size() || !shard)
        return;
      const auto i = static_cast<std::size_t>(index);
      s.cfg.ps.handles[i] = as_shard(shard);
      if (const auto it = s.parked.find(i); it != s.parked.end()) {
        const bool after_push = it->second;
        s.parked.erase(it);
        pull_from(self, i, after_push);
      }
    },
    [=](reform_atom, int generation, std::vector<std::int64_t> survivors) {
      // A worker was lost: the survivors share out the data among them
      // (its shard too) from the next batch on.
      self->state.reshard_among(self->state.generation, generation, survivors);
    });
}

} // namespace

caf::actor spawn_worker(caf::actor_system& sys, worker_config cfg) {
  if (cfg.vclock) // one event at a time on the simulation's scheduler: no thread of its own
    return sys.spawn(worker_behavior, std::move(cfg));
  return sys.spawn<caf::detached>(worker_behavior, std::move(cfg));
}

} // namespace gradwire::actors
