#include "actors/ps_shard_state.hpp"
#include "actors/refuse.hpp"

#include "kernels/log.hpp"

#include "kernels/backend.hpp"
#include "kernels/cpu/denormals.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <limits>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

namespace gradwire::actors {
namespace shard_detail {


std::size_t len(const shard_state& s) { return s.cfg.end - s.cfg.begin; }

/// A snapshot the receiver may keep while the shard moves on.
slice params_copy(const shard_state& s) {
  auto out = slice::empty({static_cast<std::int64_t>(len(s))});
  std::memcpy(out.data(), s.params.data(), len(s) * sizeof(float));
  return out;
}

/// After the version moved: the copies due, the snapshot requests it satisfies.
void after_version(shard_state& s) {
  s.copies->after_version(s.version, [&] { return take_snapshot(s); });
}

void record(shard_state& s, std::int64_t staleness) {
  const auto i = static_cast<std::size_t>(std::max<std::int64_t>(0, staleness));
  if (s.staleness.size() <= i)
    s.staleness.resize(i + 1, 0);
  ++s.staleness[i];
}

void next_version(shard_state& s) {
  ++s.version;
  after_version(s);
}

void applied(shard_state& s) {
  if (s.cfg.vclock) // virtual time: the shard is busy for as long as the model says applying takes
    s.cfg.vclock->charge_apply(static_cast<std::int64_t>(len(s)) * static_cast<std::int64_t>(sizeof(float)));
  next_version(s);
}

void apply(shard_state& s, const float* grad, float lr_scale) {
  trace_scope span(s.tr, "apply", s.version);
  kernels::flush_denormals_on_this_thread();
  s.opt->begin_step();
  s.opt->update(s.params.data(), grad, 0, len(s), lr_scale);
  applied(s);
}

void apply_plain(shard_state& s, const float* grad, float lr) {
  trace_scope span(s.tr, "apply", s.version);
  kernels::flush_denormals_on_this_thread();
  kernels::backend_for(kernels::device::cpu()).axpy(len(s), -lr, grad, s.params.data());
  applied(s);
}

std::int64_t slowest(const shard_state& st) {
  std::int64_t low = std::numeric_limits<std::int64_t>::max();
  for (std::size_t r = 0; r < st.clocks.size(); ++r)
    if (st.live[r])
      low = std::min(low, st.clocks[r]);
  return low == std::numeric_limits<std::int64_t>::max() ? 0 : low;
}

bool ready(const shard_state& st, std::int64_t min_version, std::int64_t min_clock) {
  return st.version >= min_version && slowest(st) >= min_clock;
}

/// Adds `e` to the shard's record; a record that cannot go on (a full
/// disk, its bound) is said once, and the run goes on without it.
void note(shard_state& st, const record_entry& e) {
  if (!st.rec)
    return;
  st.rec->add(e);
  if (st.rec_warned || (st.rec->error().empty() && !st.rec->capped()))
    return;
  st.rec_warned = true;
  if (!st.rec->error().empty())
    log::warn("shard {}: the record stops here: {}", st.cfg.id, st.rec->error());
  else
    log::warn("shard {}: the record stops at {} bytes (experiment.record_max_mb); a replay follows it that far",
              st.cfg.id, st.rec->bytes());
}

/// The slice for a pull by `rank` (DC-ASGD's rule keeps it as that rank's w_read).
slice answer(shard_state& st, int rank) {
  note(st, {true, rank, st.clocks[static_cast<std::size_t>(rank)], 0});
  auto snap = params_copy(st);
  st.rule->answered(rank, snap); // read-only from here on, shared with the worker
  return snap;
}

/// Answers the waiting pulls the current version and clocks satisfy.
void answer_pulls(shard_state& st) {
  std::vector<pending_pull> still;
  for (auto& p : st.waiting) {
    if (ready(st, p.min_version, p.min_clock))
      p.promise.deliver(st.version, answer(st, p.rank),
                        std::chrono::duration<double>(now_on(st.cfg.vclock.get()) - p.since).count());
    else
      still.push_back(std::move(p));
  }
  st.waiting = std::move(still);
}

/// Keeps `rank`'s push of this version; false when it already pushed one.
bool hold(shard_state& st, int rank, const slice& grad, std::int64_t samples) {
  auto& held = st.round[static_cast<std::size_t>(rank)];
  if (held.defined())
    return false;
  held = grad;
  st.round_samples[static_cast<std::size_t>(rank)] = samples;
  return true;
}

/// st.sum = the held pushes, each times its weight (samples, or 1), added
/// in rank order; the held pushes are let go.
void sum_in_rank_order(shard_state& st, bool by_samples) {
  auto& be = kernels::backend_for(kernels::device::cpu());
  be.fill(st.sum.data(), len(st), 0.f);
  for (std::size_t r = 0; r < st.round.size(); ++r) {
    if (!st.round[r].defined())
      continue;
    be.axpy(len(st), by_samples ? static_cast<float>(st.round_samples[r]) : 1.f, st.round[r].data(), st.sum.data());
    st.round[r] = slice{};
  }
}

/// Completes the version once the pushes the rule needs are in (of the live workers).
void complete_if_in(shard_state& st) {
  const int live = static_cast<int>(std::count(st.live.begin(), st.live.end(), true));
  if (st.pushed == 0 || st.pushed < st.rule->needed(live))
    return;
  sum_in_rank_order(st, st.rule->by_samples());
  const int pushes = st.pushed;
  const std::int64_t samples = st.samples;
  st.pushed = 0;
  st.samples = 0;
  st.rule->complete(st, st.sum.data(), pushes, samples);
  answer_pulls(st);
}

/// The coordinator's word that the workers are now `survivors`: a lost
/// one's push of the version in progress is let go, and the version
/// completes with the others'.
void reform(shard_state& st, int generation, const std::vector<std::int64_t>& survivors) {
  if (generation <= st.generation)
    return;
  st.generation = generation;
  std::vector<bool> live(st.live.size(), false);
  for (auto r : survivors)
    if (r >= 0 && static_cast<std::size_t>(r) < live.size())
      live[static_cast<std::size_t>(r)] = true;
  for (std::size_t r = 0; r < live.size(); ++r) {
    if (live[r] || !st.live[r])
      continue;
    st.live[r] = false;
    if (!st.round.empty() && st.round[r].defined()) {
      st.round[r] = slice{};
      --st.pushed;
      st.samples -= st.round_samples[r];
    }
  }
  if (st.rule->rounds())
    complete_if_in(st);
  answer_pulls(st); // SSP: the slowest clock may have moved on
}

/// A push the rule applies at once, at the worker's lr_scale; recorded.
void apply_now(shard_state& st, int rank, std::int64_t step, std::int64_t staleness, const slice& grad) {
  const auto r = static_cast<std::size_t>(rank);
  const float lr_scale = r < st.cfg.worker_lr_scale.size() ? static_cast<float>(st.cfg.worker_lr_scale[r]) : 1.f;
  note(st, {false, rank, step, staleness});
  st.rule->apply_push(st, rank, staleness, grad.data(), lr_scale);
  answer_pulls(st); // SSP: this push may have advanced the slowest clock
}

/// apply_now, or the error text of a rule that threw (a Python rule's
/// traceback): the push is not applied, the shard goes on.
std::string applied_now(shard_state& st, int rank, std::int64_t step, std::int64_t staleness, const slice& grad) {
  try {
    apply_now(st, rank, step, staleness, grad);
  } catch (const std::exception& e) {
    return "shard " + std::to_string(st.cfg.id) + ": rank " + std::to_string(rank) + "'s push: " + e.what();
  }
  return {};
}

/// A compressed push as the dense slice it stands for (a fresh one: a sync
/// or local-SGD shard holds it until the version completes). Throws
/// gradwire::error naming what is wrong with a malformed payload.
slice decoded(const shard_state& st, const slice& payload) {
  auto out = slice::zeros({static_cast<std::int64_t>(len(st))});
  std::vector<std::uint32_t> words(static_cast<std::size_t>(payload.numel()));
  std::memcpy(words.data(), payload.data(), words.size() * sizeof(std::uint32_t));
  st.decoder->accumulate(words.data(), words.size(), 1.f, out.data());
  return out;
}

/// Takes one push: sums it (sync, average) or applies it (async).
push_outcome take_push(shard_state& st, int rank, std::int64_t base_version, std::int64_t step, std::int64_t samples,
                       const slice& grad) {
  trace_scope span(st.tr, "push", rank);
  if (rank < 0 || static_cast<std::size_t>(rank) >= st.clocks.size())
    return {"shard " + std::to_string(st.cfg.id) + ": push from unknown rank " + std::to_string(rank)};
  if (!st.live[static_cast<std::size_t>(rank)])
    return {"shard " + std::to_string(st.cfg.id) + ": push from rank " + std::to_string(rank) + ", lost to the job"};
  slice dense = grad;
  if (st.decoder) {
    try {
      dense = decoded(st, grad);
    } catch (const gradwire::error& e) {
      return {"shard " + std::to_string(st.cfg.id) + ": rank " + std::to_string(rank) + " pushed " + e.what()};
    }
  }
  if (static_cast<std::size_t>(dense.numel()) != len(st))
    return {"shard " + std::to_string(st.cfg.id) + ": gradient of " + std::to_string(dense.numel()) +
            " floats for a slice of " + std::to_string(len(st))};
  st.clocks[static_cast<std::size_t>(rank)] = std::max(st.clocks[static_cast<std::size_t>(rank)], step + 1);
  st.max_gap = std::max(st.max_gap, *std::max_element(st.clocks.begin(), st.clocks.end()) - slowest(st));
  const std::int64_t staleness = st.version - base_version;
  const auto twice = [&] {
    return push_outcome{"shard " + std::to_string(st.cfg.id) + ": a second push from rank " + std::to_string(rank) +
                        " for version " + std::to_string(st.version)};
  };
  if (auto early = st.rule->screen(st, rank, base_version))
    return {{}, *early};
  if (st.rule->counts_staleness())
    record(st, staleness);
  if (!st.rule->rounds())
    return {applied_now(st, rank, step, staleness, dense), staleness};
  if (!hold(st, rank, dense, samples))
    return twice();
  st.samples += samples;
  ++st.pushed;
  complete_if_in(st);
  return {{}, staleness};
}

/// The shard's state before its first message: its range from `initial`
/// (or a rebuilt shard's version and clocks), the buffers its mode needs.
void init_shard(shard_state& s, const shard_config& cfg, slice initial) {
  s.cfg = cfg;
  s.copies.emplace(cfg.snapshot_every_versions, "shard " + std::to_string(cfg.id));
  s.tr = trace_ref::open(cfg.trace, "shard " + std::to_string(cfg.id), cfg.vclock.get());
  s.params = initial;
  s.rule = make_server_rule(cfg, len(s), initial);
  s.opt = std::make_unique<models::optimizer>(s.rule->optimizer(cfg), len(s), kernels::device::cpu());
  s.clocks.assign(static_cast<std::size_t>(std::max(1, cfg.workers)), 0);
  s.dropped.assign(s.clocks.size(), 0);
  s.live.assign(s.clocks.size(), true);
  s.paces = pace_table(static_cast<int>(s.clocks.size()));
  if (cfg.compress.mode != models::compress_mode::none)
    s.decoder = std::make_unique<models::compressor>(cfg.compress, len(s));
  if (s.rule->rounds()) {
    s.sum = slice::zeros({static_cast<std::int64_t>(len(s))});
    s.round.assign(s.clocks.size(), slice{});
    s.round_samples.assign(s.clocks.size(), 0);
  }
  if (cfg.first_clocks.size() == s.clocks.size() && cfg.first_live.size() == s.live.size()) { // rebuilt
    s.version = std::max<std::int64_t>(0, cfg.first_version);
    s.clocks = cfg.first_clocks;
    s.live = cfg.first_live;
  }
  if (cfg.resume)
    restore(s, *cfg.resume);
  if (!cfg.record_path.empty()) {
    const record_header h{cfg.id, static_cast<std::int64_t>(cfg.begin), static_cast<std::int64_t>(cfg.end), cfg.workers,
                          std::max(1, cfg.ps.local_steps), cfg.record_run};
    s.rec = std::make_unique<record_writer>(cfg.record_path, h, cfg.record_max_bytes);
    if (!s.rec->error().empty()) {
      log::warn("shard {}: no record: {}", cfg.id, s.rec->error());
      s.rec.reset();
    }
  }
  if (cfg.replay)
    s.gate = open_gate(cfg.replay, cfg.workers);
}

/// (snapshot_atom, version): the shard's part of a checkpoint at
/// `version`, kept or awaited; -1: as it is now.
caf::result<std::string, slice> on_snapshot_request(shard_self self, std::int64_t version) {
  auto& st = self->state;
  if (version < 0) {
    auto [m, f] = shard_copies::as_reply(take_snapshot(st));
    return {m, f};
  }
  if (const auto* k = st.copies->find(version)) {
    auto [m, f] = shard_copies::as_reply(*k);
    st.copies->taken(version);
    return {m, f};
  }
  if (st.copies->will_keep(version, st.version)) {
    auto rp = self->make_response_promise();
    st.copies->wait(version, rp);
    return rp;
  }
  return caf::make_error(caf::sec::invalid_argument, st.copies->missing(version, st.version));
}

/// A pull, answered now or once the version and the slowest clock allow.
caf::result<std::int64_t, slice, double> on_pull(shard_self self, int rank, std::int64_t min_version,
                                                 std::int64_t min_clock) {
  auto& st = self->state;
  if (rank < 0 || static_cast<std::size_t>(rank) >= st.clocks.size())
    return caf::make_error(caf::sec::invalid_argument,
                           "shard " + std::to_string(st.cfg.id) + ": pull from unknown rank " + std::to_string(rank));
  if (st.gate) {
    held_message m{held_message::what::pull, 0, 0, 0, min_version, min_clock, {}, self->make_response_promise()};
    auto rp = m.promise;
    hold_for_turn(self, rank, std::move(m));
    return rp;
  }
  if (ready(st, min_version, min_clock))
    return {st.version, answer(st, rank), 0.0};
  auto rp = self->make_response_promise();
  st.waiting.push_back({rank, min_version, min_clock, rp, now_on(st.cfg.vclock.get())});
  return rp;
}

/// A replay's push, answered when the record says it was applied.
caf::response_promise held_push(shard_self self, held_message::what kind, int rank, std::int64_t base_version,
                                std::int64_t step, std::int64_t samples, slice grad) {
  held_message m{kind, base_version, step, samples, 0, 0, std::move(grad), self->make_response_promise()};
  auto rp = m.promise;
  hold_for_turn(self, rank, std::move(m));
  return rp;
}

/// A push whose reply carries the parameters after it (async shards only).
caf::result<std::int64_t, std::int64_t, slice> on_push_pull(shard_self self, int rank, std::int64_t base_version,
                                                            std::int64_t step, std::int64_t samples, slice grad) {
  auto& st = self->state;
  if (st.rule->rounds())
    return caf::make_error(caf::sec::invalid_argument,
                           "shard " + std::to_string(st.cfg.id) + ": push-pull from rank " + std::to_string(rank) +
                             " to a " + st.rule->name() + " shard (async only)");
  if (st.gate)
    return held_push(self, held_message::what::push_pull, rank, base_version, step, samples, std::move(grad));
  auto out = take_push(st, rank, base_version, step, samples, grad);
  if (!out.error.empty())
    return caf::make_error(caf::sec::invalid_argument, std::move(out.error));
  return {out.staleness, st.version, answer(st, rank)};
}

/// A push: applied, summed or held for its turn (a replay).
caf::result<std::int64_t, std::int64_t> on_push(shard_self self, int rank, std::int64_t base_version,
                                                std::int64_t step, std::int64_t samples, slice grad) {
  if (self->state.gate)
    return held_push(self, held_message::what::push, rank, base_version, step, samples, std::move(grad));
  auto out = take_push(self->state, rank, base_version, step, samples, grad);
  if (!out.error.empty())
    return caf::make_error(caf::sec::invalid_argument, std::move(out.error));
  return {out.staleness, self->state.version};
}

shard_actor::behavior_type shard_behavior(shard_self self, shard_config cfg, slice initial) {
  refuse_unexpected(self, "shard " + std::to_string(cfg.id));
  try {
    init_shard(self->state, cfg, std::move(initial));
  } catch (const std::exception& e) {
    self->quit(caf::make_error(caf::sec::invalid_argument, e.what()));
    return {shard_actor::behavior_type::unsafe_init{}, caf::behavior{}}; // it has quit: no handler runs
  }
  self->state.rule->start(self);
  return {
    [=](snapshot_atom, std::int64_t version) { return on_snapshot_request(self, version); },
    [=](pin_atom, std::int64_t version) {
      auto& st = self->state;
      st.copies->pin(version, st.version, [&] { return take_snapshot(st); });
    },
    [=](pull_atom, int rank, std::int64_t min_version, std::int64_t min_clock) {
      return on_pull(self, rank, min_version, min_clock);
    },
    [=](push_atom, int rank, std::int64_t base_version, std::int64_t step, std::int64_t samples, slice grad) {
      return on_push(self, rank, base_version, step, samples, std::move(grad));
    },
    [=](push_pull_atom, int rank, std::int64_t base_version, std::int64_t step, std::int64_t samples, slice grad) {
      return on_push_pull(self, rank, base_version, step, samples, std::move(grad));
    },
    [=](pace_atom, int rank, std::int64_t step, double seconds_per_step) {
      return on_pace(self->state, rank, step, seconds_per_step);
    },
    [=](reform_atom, int generation, std::vector<std::int64_t> survivors) {
      reform(self->state, generation, survivors);
    },
    [=](stats_atom) -> caf::result<std::int64_t, histogram, std::int64_t, std::vector<std::int64_t>> {
      if (self->state.rec) // asked once the workers are done: the record is whole on disk for rank 0 to read
        self->state.rec->flush();
      return {self->state.version, self->state.staleness, self->state.max_gap, self->state.dropped};
    },
    [=](fetch_atom) -> caf::result<std::int64_t, slice> {
      return {self->state.version, params_copy(self->state)};
    },
  };
}

} // namespace shard_detail

shard_actor spawn_ps_shard(caf::actor_system& sys, const shard_config& cfg, slice initial) {
  return sys.spawn(shard_detail::shard_behavior, cfg, std::move(initial));
}

} // namespace gradwire::actors
