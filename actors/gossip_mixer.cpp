#include "actors/gossip_mixer.hpp"
#include "actors/worker_protocol.hpp"

#include "actors/worker_core.hpp"
#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "kernels/log.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace gradwire::actors {

/// x <- (x + theirs) / 2.
void average_into(slice& x, const slice& theirs) {
  auto& be = kernels::backend_for(kernels::device::cpu());
  be.scale(static_cast<std::size_t>(x.numel()), 0.5f, x.data());
  be.axpy(static_cast<std::size_t>(x.numel()), 0.5f, theirs.data(), x.data());
}

mix_gate open_mix_gate(std::shared_ptr<const mix_record> record) {
  check_replayable(*record);
  mix_gate g;
  const auto n = static_cast<std::size_t>(record->header.workers);
  g.of_rank.resize(n);
  g.done_of_rank.assign(n, 0);
  for (std::size_t i = 0; i < record->events.size(); ++i)
    g.of_rank[static_cast<std::size_t>(record->events[i].rank)].push_back(i);
  g.record = std::move(record);
  return g;
}

namespace {

/// Whether the recorded event `rec` is the one asked for: the same, or an
/// apply alone where the worker had a reply (the run's came too late).
bool matches(const mix_event& rec, const mix_event& e) {
  if (rec == e)
    return true;
  return rec.kind == mix_kind::apply_alone && e.kind == mix_kind::apply_mixed && rec.rank == e.rank && rec.step == e.step;
}

/// A replay's place for `e`: its index in the record when it matches the
/// next event of its rank; else `why` says how the replay diverged, or
/// (an average the run never took: it came after the close) the index
/// past the last.
std::optional<std::size_t> place_of(const mix_gate& g, const mix_event& e, std::string& why) {
  const auto r = static_cast<std::size_t>(e.rank);
  const auto& worker = g.record->header.worker;
  if (e.rank < 0 || r >= g.of_rank.size() || g.done_of_rank[r] >= g.of_rank[r].size()) {
    if (e.kind == mix_kind::mix)
      return g.record->events.size();
    why = describe(e) + ", beyond worker " + std::to_string(worker) + "'s record";
    return std::nullopt;
  }
  const auto at = g.of_rank[r][g.done_of_rank[r]];
  const auto& rec = g.record->events[at];
  if (!matches(rec, e)) {
    why = describe(e) + " where worker " + std::to_string(worker) + "'s record has " + describe(rec);
    return std::nullopt;
  }
  return at;
}

/// `waiter` is told when the event at `at` is due (once, however often it asks).
void wait_for(mix_gate& g, std::size_t at, const caf::actor& waiter) {
  const auto [b, e] = g.waiting.equal_range(at);
  for (auto it = b; it != e; ++it)
    if (it->second == waiter)
      return;
  g.waiting.emplace(at, waiter);
}

/// The gate moves past the event at `at`; returns who waits for the next.
std::vector<caf::actor> advance(mix_gate& g, std::size_t at) {
  ++g.next;
  ++g.done_of_rank[static_cast<std::size_t>(g.record->events[at].rank)];
  std::vector<caf::actor> wake;
  const auto [b, e] = g.waiting.equal_range(g.next);
  for (auto it = b; it != e; ++it)
    wake.push_back(it->second);
  g.waiting.erase(b, e);
  return wake;
}

} // namespace

turn store_event(gossip_store& s, const mix_event& e, const caf::actor& waiter,
                 const std::function<void(slice& x, const mix_event& as_recorded)>& op, std::string* why) {
  std::vector<caf::actor> wake;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (e.kind == mix_kind::mix && s.closed)
      return turn::closed;
    mix_event as = e;
    if (s.gate) {
      auto& g = *s.gate;
      std::string diverged;
      const auto at = place_of(g, e, diverged);
      if (!at) {
        if (why)
          *why = diverged + " (the replay diverged from the record)";
        return turn::diverged;
      }
      if (*at != g.next) {
        wait_for(g, *at, waiter);
        return turn::later;
      }
      as = g.record->events[*at];
      op(s.x, as);
      wake = advance(g, *at);
    } else
      op(s.x, as);
    if (as.kind == mix_kind::close)
      s.closed = true;
    if (s.rec)
      s.rec->add(as);
  }
  for (const auto& a : wake)
    caf::anon_send(as_turn_taker(a), turn_atom::value);
  return turn::taken;
}

namespace {

/// A neighbour's request to average, held in a replay until its turn.
struct held_average {
  int rank = 0;
  std::int64_t step = 0;
  slice theirs;
  caf::typed_response_promise<slice> promise;
};

struct mixer_state {
  std::shared_ptr<gossip_store> store;
  std::vector<held_average> held;
  static inline const char* name = "gossip_mixer";
};

using mixer_pointer = gossip_mixer_actor::stateful_pointer<mixer_state>;

/// Replies to `h` with x_j and averages theirs in, if that is due (or
/// refuses it); false: held on until the store moves on.
bool try_average(mixer_pointer self, held_average& h) {
  slice mine;
  std::string why;
  const auto t = store_event(
    *self->state.store, {mix_kind::mix, h.rank, h.step}, caf::actor_cast<caf::actor>(self),
    [&](slice& x, const mix_event&) {
      mine = copy_of(x);
      average_into(x, h.theirs);
    },
    &why);
  switch (t) {
  case turn::taken:
    h.promise.deliver(std::move(mine));
    return true;
  case turn::later:
    return false;
  case turn::closed:
    h.promise.deliver(caf::make_error(caf::sec::request_receiver_down));
    return true;
  case turn::diverged:
    log::warn("AD-PSGD mixer: {}", why);
    h.promise.deliver(caf::make_error(caf::sec::invalid_argument, "AD-PSGD mixer: " + why));
    return true;
  }
  return true;
}

/// The passive side of AD-PSGD: replies with x_j, then x_j = (x_j + x_i) / 2.
gossip_mixer_actor::behavior_type mixer_behavior(mixer_pointer self, std::shared_ptr<gossip_store> store) {
  self->state.store = std::move(store);
  // Ended with its worker: the requests it holds get an answer, not silence.
  self->set_exit_handler([self](caf::exit_msg& m) {
    for (auto& h : self->state.held)
      h.promise.deliver(caf::make_error(caf::sec::request_receiver_down));
    self->state.held.clear();
    self->quit(m.reason);
  });
  return {
    [self](average_atom, int rank, std::int64_t step, slice theirs) -> caf::result<slice> {
      const auto want = self->state.store->x.numel(); // its shape never changes: read without the lock
      if (theirs.numel() != want)
        return caf::make_error(caf::sec::runtime_error, "AD-PSGD: rank " + std::to_string(rank) + " sent " +
                                                          std::to_string(theirs.numel()) + " parameters, expected " +
                                                          std::to_string(want));
      held_average h{rank, step, std::move(theirs), self->make_response_promise<slice>()};
      auto rp = h.promise;
      if (!try_average(self, h))
        self->state.held.push_back(std::move(h));
      return rp;
    },
    [self](turn_atom) { // the store moved on: the held requests whose turn came
      auto& held = self->state.held;
      held.erase(std::remove_if(held.begin(), held.end(), [self](held_average& h) { return try_average(self, h); }),
                 held.end());
    },
  };
}

} // namespace

gossip_mixer_actor spawn_gossip_mixer(caf::actor_system& sys, std::shared_ptr<gossip_store> store) {
  return sys.spawn(mixer_behavior, std::move(store));
}

} // namespace gradwire::actors
