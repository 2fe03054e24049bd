#include "actors/worker.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"

#include <cstring>
#include <map>

namespace gradwire::actors {
namespace {

struct gossip_state : worker_core {
  /// D-PSGD: neighbours' parameters by step (a neighbour may be one step ahead).
  std::map<std::int64_t, std::vector<std::pair<int, slice>>> inbox;
  bool exchanging = false;
  std::mt19937_64 pick;
  static inline const char* name = "gossip_worker";
};

using gossip_actor = caf::stateful_actor<gossip_state>;

slice snapshot(const gossip_state& st) {
  auto s = slice::empty({static_cast<std::int64_t>(st.model->size())});
  std::memcpy(s.data(), st.model->params().data(), st.model->size() * sizeof(float));
  return s;
}

void begin_step(gossip_actor* self);

void next_step(gossip_actor* self) {
  self->state.end_step(self);
  self->send(self, step_atom::value); // let waiting gossip requests in between steps
}

/// D-PSGD: once every neighbour's parameters of this step are in, x becomes
/// the Metropolis-weighted mean x_i = w_ii x_i + sum_j w_ij x_j.
void try_mix(gossip_actor* self) {
  auto& st = self->state;
  auto it = st.inbox.find(st.step);
  if (!st.exchanging || it == st.inbox.end() || it->second.size() < st.cfg.graph.size())
    return;
  auto& be = kernels::backend_for(kernels::device::cpu());
  float* x = st.model->params().data();
  const std::size_t n = st.model->size();
  const float w_self = st.cfg.mix_weights.back();
  be.scale(n, w_self, x);
  for (const auto& [rank, params] : it->second) {
    std::size_t k = 0;
    while (st.cfg.graph[k] != rank)
      ++k;
    be.axpy(n, st.cfg.mix_weights[k], params.data(), x);
  }
  st.inbox.erase(it);
  st.exchanging = false;
  st.add_wait(seconds_since(st.phase));
  next_step(self);
}

void begin_step(gossip_actor* self) {
  auto& st = self->state;
  if (st.step >= st.cfg.steps) {
    st.finish(self, {}, true);
    return;
  }
  try {
    st.compute();
  } catch (const gradwire::error& ex) {
    st.finish(self, ex.what());
    return;
  }
  st.trainer->apply();
  if (st.cfg.graph.empty()) {
    next_step(self);
    return;
  }
  if (st.cfg.gossip.mode == gossip_mode::dpsgd) {
    auto mine = snapshot(st); // one read-only snapshot shared by all neighbours
    for (int r : st.cfg.graph)
      self->send(st.cfg.neighbours[static_cast<std::size_t>(r)], gossip_atom::value, st.step, st.cfg.rank, mine);
    st.exchanging = true;
    try_mix(self);
    return;
  }
  // AD-PSGD: average with one random neighbour, which does the same on its side.
  const int peer = st.cfg.graph[std::uniform_int_distribution<std::size_t>(0, st.cfg.graph.size() - 1)(st.pick)];
  self->request(st.cfg.neighbours[static_cast<std::size_t>(peer)], st.cfg.timeout, gossip_atom::value,
                st.cfg.rank, snapshot(st))
    .then(
      [=](slice theirs) {
        auto& s = self->state;
        auto& be = kernels::backend_for(kernels::device::cpu());
        be.scale(s.model->size(), 0.5f, s.model->params().data());
        be.axpy(s.model->size(), 0.5f, theirs.data(), s.model->params().data());
        s.add_wait(seconds_since(s.phase));
        next_step(self);
      },
      [=](caf::error&) { next_step(self); }); // the neighbour has finished: no average this step
}

caf::behavior gossip_behavior(gossip_actor* self, worker_config cfg) {
  auto& st = self->state;
  try {
    st.init(std::move(cfg)); // first: a failure below is reported with the rank, to the coordinator
    check(st.cfg.mix_weights.size() == st.cfg.graph.size() + 1, "gossip weights do not match the graph");
    st.pick.seed(st.cfg.seed * 104729 + static_cast<std::uint64_t>(st.cfg.rank));
  } catch (const std::exception& e) {
    st.finish(self, st.who() + e.what());
    return {};
  }
  st.start_heartbeats(self);
  return {
    [=](wire_atom, std::vector<caf::actor> all) { // every worker's handle, by rank: start
      self->state.cfg.neighbours = std::move(all);
      begin_step(self);
    },
    [=](step_atom) { begin_step(self); },
    [=](done_atom) { self->state.finish(self, {}, true); }, // the coordinator's stop
    [=](beat_atom) { self->state.on_beat(self); },
    [=](gossip_atom, std::int64_t step, int rank, slice theirs) { // D-PSGD
      self->state.inbox[step].emplace_back(rank, std::move(theirs));
      try_mix(self);
    },
    [=](gossip_atom, int, slice theirs) -> slice {
      // AD-PSGD, the passive side: reply with x_j, then x_j = (x_j + x_i) / 2.
      auto& s = self->state;
      auto mine = snapshot(s);
      auto& be = kernels::backend_for(kernels::device::cpu());
      be.scale(s.model->size(), 0.5f, s.model->params().data());
      be.axpy(s.model->size(), 0.5f, theirs.data(), s.model->params().data());
      return mine;
    },
  };
}

} // namespace

caf::actor spawn_gossip_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn<caf::detached>(gossip_behavior, std::move(cfg));
}

} // namespace gradwire::actors
