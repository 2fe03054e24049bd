/// @file adpsgd_worker.cpp
/// AD-PSGD's side of the gossip worker (Lian et al. 2018): each step it
/// reads x_i, takes its gradient there, averages x_i with one random
/// neighbour's x_j through that neighbour's mixer, and applies the
/// gradient to x_i as it is by then. Each touch of x_i is a store event
/// (gossip_mixer.hpp): recorded, and in a replay taken in the record's order.

#include "actors/gossip_worker_state.hpp"

#include "kernels/log.hpp"

#include <cstring>
#include <optional>
#include <utility>

namespace gradwire::actors::gossip_detail {
namespace {

using store_op = std::function<void(slice& x, const mix_event& as_recorded)>;

/// Runs `op` on x_i as the event `kind` of this step (store_event); when it
/// is not yet due, `again` runs on the turn. False: not now (waiting, or
/// the replay diverged and the worker has failed).
bool in_turn(gossip_actor* self, mix_kind kind, const store_op& op, std::function<void()> again) {
  auto& st = self->state;
  std::string why;
  const mix_event e{kind, st.cfg.rank, st.step};
  switch (store_event(*st.store, e, caf::actor_cast<caf::actor>(self), op, &why)) {
  case turn::taken:
    return true;
  case turn::later:
    st.on_turn = std::move(again);
    return false;
  case turn::closed:
  case turn::diverged:
    break;
  }
  st.finish(self, st.who() + "AD-PSGD replay: " + why);
  return false;
}

void into_model(gossip_state& st, const slice& x) { std::memcpy(st.model->params().data(), x.data(), x.bytes()); }

/// The step's end: x_i averaged with `theirs` (when there is a reply and
/// the record, in a replay, took it), the gradient applied to x_i as it is
/// now, and the model's parameters following it.
void apply_step(gossip_actor* self, std::optional<slice> theirs) {
  auto& st = self->state;
  const auto kind = theirs ? mix_kind::apply_mixed : mix_kind::apply_alone;
  const auto op = [&](slice& x, const mix_event& as) {
    if (as.kind == mix_kind::apply_mixed)
      average_into(x, *theirs);
    into_model(st, x);
    st.trainer->apply();
    std::memcpy(x.data(), st.model->params().data(), x.bytes());
  };
  if (!in_turn(self, kind, op, [self, theirs] { apply_step(self, theirs); }))
    return;
  next_step(self);
}

/// The neighbour's reply (or its absence: it finished, or no reply in time).
void on_reply(gossip_actor* self, int peer, std::optional<slice> theirs) {
  auto& st = self->state;
  if (theirs) {
    st.report.bytes_received += static_cast<std::int64_t>(theirs->bytes());
    st.add_wait(st.since(st.phase));
    if (theirs->numel() != st.store->x.numel()) { // a bad peer: no average this step
      log::warn("{}AD-PSGD: rank {} replied with {} parameters, expected {}", st.who(), peer, theirs->numel(),
                st.store->x.numel());
      theirs.reset();
    }
  }
  apply_step(self, std::move(theirs));
}

/// Copies x_i and asks the picked neighbour's mixer to average with it.
void send_x(gossip_actor* self) {
  auto& st = self->state;
  slice mine;
  if (!in_turn(self, mix_kind::send, [&](slice& x, const mix_event&) { mine = copy_of(x); }, [self] { send_x(self); }))
    return;
  const int peer = st.peer;
  const auto ticket = st.requests.open([self, peer](caf::error&) { on_reply(self, peer, std::nullopt); });
  st.report.bytes_sent += static_cast<std::int64_t>(mine.bytes());
  self->request(as_mixer(st.mixers.at(peer)), st.request_timeout(), average_atom::value, st.cfg.rank, st.step, mine)
    .then(
      [self, ticket, peer](const slice& theirs) {
        if (self->state.requests.close(ticket)) // else given up already
          on_reply(self, peer, theirs);
      },
      [self, ticket, peer](caf::error&) {
        if (self->state.requests.close(ticket))
          on_reply(self, peer, std::nullopt);
      });
}

} // namespace

void start_adpsgd(gossip_actor* self) {
  auto& st = self->state;
  st.store = std::make_shared<gossip_store>();
  st.store->x = copy_of(st.model->params());
  if (!st.cfg.gossip.record_path.empty()) {
    const auto& g = st.cfg.gossip;
    st.store->rec =
      std::make_unique<mix_record_writer>(g.record_path, mix_header{st.cfg.rank, st.cfg.world, g.record_run}, g.record_max_bytes);
    if (!st.store->rec->error().empty())
      log::warn("{}no record: {}", st.who(), st.store->rec->error());
  }
  if (st.cfg.gossip.replay)
    st.store->gate = open_mix_gate(st.cfg.gossip.replay);
  const auto mixer = caf::actor_cast<caf::actor>(spawn_gossip_mixer(self->system(), st.store));
  self->attach_functor([mixer](const caf::error&) { caf::anon_send_exit(mixer, caf::exit_reason::user_shutdown); });
  // Virtual time: the neighbours reach it through the link model.
  st.mixer = st.cfg.vclock ? st.cfg.vclock->place_beside(st.cfg.rank, mixer) : mixer;
}

bool read_x(gossip_actor* self, std::function<void()> again) {
  return in_turn(self, mix_kind::read, [&](slice& x, const mix_event&) { into_model(self->state, x); }, std::move(again));
}

void average_with_one(gossip_actor* self) {
  auto& st = self->state;
  st.peer = st.cfg.gossip.links[std::uniform_int_distribution<std::size_t>(0, st.cfg.gossip.links.size() - 1)(st.pick)];
  send_x(self);
}

bool close_store(gossip_actor* self, std::function<void()> again) {
  auto& st = self->state;
  if (!in_turn(self, mix_kind::close, [&](slice& x, const mix_event&) { into_model(st, x); }, std::move(again)))
    return false;
  if (st.store->rec && st.store->rec->capped())
    log::warn("{}the record stops at {} bytes (experiment.record_max_mb)", st.who(), st.store->rec->bytes());
  return true;
}

void on_mixer(gossip_actor* self, int rank, caf::actor mixer, const std::function<void()>& start) {
  auto& s = self->state;
  if (std::find(s.cfg.gossip.links.begin(), s.cfg.gossip.links.end(), rank) == s.cfg.gossip.links.end() || !mixer) {
    log::warn("{}AD-PSGD: a mixer from rank {}, not a neighbour: ignored", s.who(), rank);
    return;
  }
  s.mixers[rank] = std::move(mixer);
  start();
}

void on_turn(gossip_actor* self) {
  std::function<void()> f;
  f.swap(self->state.on_turn);
  if (f)
    f();
}

} // namespace gradwire::actors::gossip_detail
