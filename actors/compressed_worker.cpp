/// @file compressed_worker.cpp
/// A data-parallel worker whose gradient travels compressed
/// (transport.compress, models/compress.hpp). Compressed payloads do not
/// add up element by element (top-k's indices differ from worker to
/// worker), so instead of a reduce-scatter each worker sends its payload
/// to every other one (an all-gather: (n - 1) payloads out and in, the
/// bytes a ring all-gather moves) and every worker decodes all n in rank
/// order. So each replica applies the same mean, bit for bit, at any
/// process count. PowerSGD takes two such rounds a step (P, then Q), each
/// summed in rank order.

#include "actors/worker.hpp"
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
  std::vector<float> mean; ///< the decoded mean gradient

  static inline const char* name = "compressed_worker";
};

using compressed_actor = caf::stateful_actor<compressed_state>;

int phases(const compressed_state& st) { return st.power ? 2 : 1; }

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

/// The rank-ordered sum of a round's float payloads (PowerSGD).
std::vector<float> summed(const std::vector<slice>& got, std::size_t expect) {
  std::vector<float> sum(expect, 0.f);
  for (std::size_t r = 0; r < got.size(); ++r) {
    check(static_cast<std::size_t>(got[r].numel()) == expect,
          "rank " + std::to_string(r) + " sent " + std::to_string(got[r].numel()) + " floats for " +
            std::to_string(expect));
    const float* p = got[r].data();
    for (std::size_t i = 0; i < expect; ++i)
      sum[i] += p[i];
  }
  return sum;
}

void send_phase(compressed_actor* self, slice payload) {
  auto& st = self->state;
  const auto n = static_cast<std::size_t>(st.cfg.world);
  for (std::size_t r = 0; r < n; ++r)
    if (static_cast<int>(r) != st.cfg.rank)
      self->send(st.workers[r], gather_atom::value, st.step, st.phase, st.cfg.rank, payload);
  st.report.bytes_sent += static_cast<std::int64_t>(payload.bytes() * (n - 1));
  auto& got = st.rounds[{st.step, st.phase}];
  got.resize(n);
  got[static_cast<std::size_t>(st.cfg.rank)] = std::move(payload);
}

void try_complete(compressed_actor* self);

void begin_step(compressed_actor* self) {
  auto& st = self->state;
  if (st.step >= st.cfg.steps) {
    st.finish(self, {}, true);
    return;
  }
  if (st.hold())
    return;
  try {
    st.compute();
    st.in_round = true;
    st.round_start = st.now();
    st.phase = 0;
    const float* g = st.trainer->gradients().data();
    send_phase(self, st.power ? slice_of(st.power->first_payload(g)) : slice_of(st.one->encode(g, st.step, st.cfg.rank)));
    try_complete(self);
  } catch (const gradwire::error& e) {
    st.finish(self, st.who() + e.what());
  }
}

/// The round's mean into st.mean, or (PowerSGD's first phase) the next round sent.
bool decode_round(compressed_actor* self, const std::vector<slice>& got) {
  auto& st = self->state;
  const float scale = 1.f / static_cast<float>(got.size());
  if (st.power && st.phase == 0) {
    auto second = st.power->second_payload(summed(got, st.power->first_floats()));
    st.phase = 1;
    send_phase(self, slice_of(second));
    return false;
  }
  if (st.power) { // writes every element of the mean
    st.power->finish(summed(got, st.power->second_floats()), scale, st.mean.data());
    return true;
  }
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
  return true;
}

void try_complete(compressed_actor* self) {
  auto& st = self->state;
  while (st.in_round) {
    const auto it = st.rounds.find({st.step, st.phase});
    if (it == st.rounds.end() || it->second.size() != static_cast<std::size_t>(st.cfg.world))
      return;
    for (const auto& p : it->second)
      if (!p.defined())
        return;
    const auto got = std::move(it->second);
    st.rounds.erase(it);
    if (!decode_round(self, got))
      continue; // the next phase may be complete already
    st.in_round = false;
    st.end_comm();
    const auto t0 = st.now();
    st.trainer->apply(st.mean.data());
    st.add_compute(t0);
    st.begin_comm();
    st.end_step(self);
    self->send(self, tick_atom::value);
  }
}

/// A peer's payload: checked against the protocol before it is kept.
void on_gather(compressed_actor* self, std::int64_t step, int phase, int rank, slice payload) {
  auto& st = self->state;
  try {
    const int n = st.cfg.world; // (a peer wired before this worker may send before its handles come)
    check(rank >= 0 && rank < n && rank != st.cfg.rank, "a payload from rank " + std::to_string(rank));
    const std::string from = "rank " + std::to_string(rank) + ": ";
    check(phase >= 0 && phase < phases(st), from + "a payload of phase " + std::to_string(phase));
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
  if (spec.mode == models::compress_mode::powersgd)
    st.power = std::make_unique<models::powersgd>(spec, models::matrix_blocks(models::layout_of(st.cfg.spec), n), n);
  else
    st.one = std::make_unique<models::compressor>(spec, n);
  st.mean.assign(n, 0.f);
  if (st.cfg.resume)
    restore_compression(st);
  st.save_extra = [self](snapshot& s) {
    auto& c = self->state;
    s.put("compress_residual", c.power ? c.power->residual() : c.one->residual());
    if (c.power)
      s.put("powersgd_q", c.power->q());
  };
}

void on_beat(compressed_actor* self) {
  auto& st = self->state;
  if (st.in_round && st.overdue(st.round_start)) {
    std::string missing;
    const auto it = st.rounds.find({st.step, st.phase});
    for (std::size_t r = 0; r < static_cast<std::size_t>(st.cfg.world); ++r)
      if (it == st.rounds.end() || r >= it->second.size() || !it->second[r].defined())
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    st.finish(self, st.who() + "compressed exchange of step " + std::to_string(st.step) + " incomplete after " +
                      std::to_string(st.cfg.timeout.count()) + " ms: no payload from rank(s) " + missing);
    return;
  }
  st.on_beat(self);
}

caf::behavior compressed_behavior(compressed_actor* self, worker_config cfg) {
  auto& st = self->state;
  if (!start_worker(self, std::move(cfg), [self] { init_compression(self); }))
    return {};
  st.start_heartbeats(self);
  return worker_controls(self, [=] { self->state.finish(self, {}, true); }, [=] { begin_step(self); })
    .or_else(caf::message_handler{
      [=](wire_atom, const caf::actor&, std::vector<caf::actor> all) {
        auto& s = self->state;
        if (all.size() != static_cast<std::size_t>(s.cfg.world)) {
          s.finish(self, s.who() + "a compressed exchange needs every worker's handle, got " +
                           std::to_string(all.size()) + " for " + std::to_string(s.cfg.world));
          return;
        }
        s.workers = std::move(all);
        begin_step(self);
      },
      [=](gather_atom, std::int64_t step, int phase, int rank, slice payload) {
        on_gather(self, step, phase, rank, std::move(payload));
      },
      [=](beat_atom) { on_beat(self); },
    });
}

} // namespace

caf::actor spawn_compressed_worker(caf::actor_system& sys, worker_config cfg) {
  if (cfg.vclock)
    return sys.spawn(compressed_behavior, std::move(cfg));
  return sys.spawn<caf::detached>(compressed_behavior, std::move(cfg));
}

} // namespace gradwire::actors
