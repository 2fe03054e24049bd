#include "actors/gossip_graph.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/gossip_worker_state.hpp"
#include "actors/worker.hpp"
#include "kernels/log.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace gradwire::actors {
namespace gossip_detail {
namespace {

/// D-PSGD on the one-peer exponential graph (Ying et al. 2021): at step t
/// worker i sends to i + 2^(t mod log2 n) and takes from i - 2^(t mod log2 n),
/// weights 1/2 each; n a power of 2 averages exactly in log2 n steps.
bool one_peer(const gossip_state& st) { return st.cfg.gossip.graph == "exponential"; }

int hop_of(const gossip_state& st) {
  int hops = 0;
  while ((1 << (hops + 1)) <= st.cfg.world)
    ++hops;
  return 1 << static_cast<int>(st.step % std::max(1, hops));
}

bool redrawn(const gossip_state& st) { return st.cfg.gossip.graph_seed != 0 && !st.cfg.gossip.links.empty(); }

/// A redrawn graph's neighbours of this rank at `step` (lost ranks left
/// out) and their Metropolis weights on that step's graph, then its own.
const std::pair<std::vector<int>, std::vector<float>>& graph_at(gossip_state& st, std::int64_t step) {
  if (const auto it = st.drawn.find(step); it != st.drawn.end())
    return it->second;
  const auto g = graph_of_step(st.cfg.world, st.cfg.gossip.degree, st.cfg.gossip.graph_seed, step);
  const auto live = [&st](int r) { return st.gone.empty() || !st.gone[static_cast<std::size_t>(r)]; };
  std::vector<int> peers;
  for (int j : g[static_cast<std::size_t>(st.cfg.rank)])
    if (live(j))
      peers.push_back(j);
  auto weights = metropolis_weights(peers, [&](int j) {
    std::size_t d = 0;
    for (int k : g[static_cast<std::size_t>(j)])
      d += live(k) ? 1 : 0;
    return d;
  });
  while (!st.drawn.empty() && st.drawn.begin()->first < st.step) // steps past: no message can come for them
    st.drawn.erase(st.drawn.begin());
  return st.drawn[step] = {std::move(peers), std::move(weights)};
}

/// Whom this step's parameters go to, and whose are mixed in.
std::vector<int> send_to(gossip_state& st) {
  if (redrawn(st))
    return graph_at(st, st.step).first;
  return one_peer(st) ? std::vector<int>{(st.cfg.rank + hop_of(st)) % st.cfg.world} : st.cfg.gossip.links;
}
std::vector<int> take_from(gossip_state& st) {
  if (redrawn(st))
    return graph_at(st, st.step).first;
  const int w = st.cfg.world;
  return one_peer(st) ? std::vector<int>{(st.cfg.rank - hop_of(st) + w) % w} : st.cfg.gossip.links;
}
/// Their weights, then this worker's own.
std::vector<float> weights_of(gossip_state& st) {
  if (redrawn(st))
    return graph_at(st, st.step).second;
  return one_peer(st) ? std::vector<float>{0.5f, 0.5f} : st.cfg.gossip.mix_weights;
}

/// Whether `rank` is a neighbour at `step`.
bool neighbour_at(gossip_state& st, std::int64_t step, int rank) {
  const auto& peers = redrawn(st) ? graph_at(st, step).first : st.cfg.gossip.links;
  return std::find(peers.begin(), peers.end(), rank) != peers.end();
}

slice params_copy(const gossip_state& st) { return copy_of(st.model->params()); }

void begin_step(gossip_actor* self);
void exchange(gossip_actor* self);

} // namespace

void next_step(gossip_actor* self) {
  self->state.end_step(self);
  self->send(as_worker(self), tick_atom::value); // let waiting gossip requests in between steps
}

namespace {

std::vector<std::uint32_t> words_of(const slice& s) {
  std::vector<std::uint32_t> w(static_cast<std::size_t>(s.numel()));
  std::memcpy(w.data(), s.data(), w.size() * sizeof(std::uint32_t));
  return w;
}

/// D-PSGD's mix of the neighbours' parameters (`got`, in graph order):
/// the weighted mean, or the compressed gossip's rule.
void mix_in(gossip_state& st, const std::vector<int>& from, const std::vector<const slice*>& got) {
  float* x = st.model->params().data();
  const auto w = weights_of(st);
  if (st.squeeze) {
    std::vector<std::vector<std::uint32_t>> words;
    std::vector<const std::vector<std::uint32_t>*> refs;
    words.reserve(got.size());
    for (const auto* g : got)
      refs.push_back(&words.emplace_back(words_of(*g)));
    st.squeeze->mix(x, from, refs, w);
    return;
  }
  auto& be = kernels::backend_for(kernels::device::cpu());
  const std::size_t n = st.model->size();
  be.scale(n, w.back(), x);
  for (std::size_t k = 0; k < got.size(); ++k)
    be.axpy(n, w[k], got[k]->data(), x);
}

/// D-PSGD: once every neighbour's parameters of this step are in, x becomes
/// the Metropolis-weighted mean x_i = w_ii x_i + sum_j w_ij x_j.
void try_mix(gossip_actor* self) {
  auto& st = self->state;
  if (!st.exchanging)
    return;
  auto it = st.inbox.find(st.step);
  const auto from = take_from(st);
  std::size_t have = 0; // from neighbours still in the graph (a lost one's last message aside)
  if (it != st.inbox.end())
    for (const auto& got : it->second)
      have += static_cast<std::size_t>(std::count(from.begin(), from.end(), got.first));
  if (have < from.size())
    return;
  // In graph order, not arrival order: a float sum of three or more terms
  // depends on its order, and the run must be the same bits every time.
  std::vector<const slice*> in_order;
  for (int r : from)
    for (const auto& [rank, params] : it->second)
      if (rank == r) {
        in_order.push_back(&params);
        break;
      }
  try {
    mix_in(st, from, in_order);
  } catch (const gradwire::error& e) {
    st.finish(self, st.who() + "D-PSGD: " + e.what());
    return;
  }
  if (it != st.inbox.end())
    st.inbox.erase(it);
  st.exchanging = false;
  st.add_wait(st.since(st.phase));
  next_step(self);
}

/// Reports this worker's model (AD-PSGD: x_i, closed to neighbours first).
void finish_gossip(gossip_actor* self) {
  auto& st = self->state;
  if (st.store && !close_store(self, [self] { finish_gossip(self); }))
    return;
  st.finish(self, {}, true);
}

void begin_step(gossip_actor* self) {
  auto& st = self->state;
  if (st.step >= st.cfg.steps) {
    finish_gossip(self);
    return;
  }
  if (st.hold(self))
    return;
  if (adpsgd(st) && !read_x(self, [self] { begin_step(self); })) // the gradient is taken at this read of x_i
    return;
  try {
    if (st.offloads()) { // virtual time: on the simulation's threads; the mixer may average into x_i meanwhile
      st.compute_offloaded([self] { exchange(self); });
      return;
    }
    if (!st.compute(self))
      return; // a stop between two layers: held at the step before
  } catch (const gradwire::error& ex) {
    st.finish(self, ex.what());
    return;
  }
  exchange(self);
}

/// Compressed D-PSGD: what this step sends, as a slice of 32-bit words.
slice payload_of(gossip_state& st) {
  const auto words = st.squeeze->payload(st.model->params().data(), st.step, st.cfg.rank);
  st.add_compression(st.squeeze->last_energy());
  auto out = slice::empty({static_cast<std::int64_t>(words.size())});
  std::memcpy(out.data(), words.data(), words.size() * sizeof(std::uint32_t));
  return out;
}

/// After a step's gradient: apply it and gossip (D-PSGD), or average with
/// one neighbour and apply (AD-PSGD), or only apply (no neighbours).
void exchange(gossip_actor* self) {
  auto& st = self->state;
  const bool async = adpsgd(st);
  if (st.cfg.gossip.links.empty()) {
    st.trainer->apply();
    next_step(self);
    return;
  }
  if (async) {
    average_with_one(self);
    return;
  }
  st.trainer->apply(); // D-PSGD
  auto mine = st.squeeze ? payload_of(st) : params_copy(st); // one read-only snapshot shared by all neighbours
  for (int r : send_to(st)) {
    self->send(as_gossip_worker(st.cfg.gossip.neighbours[static_cast<std::size_t>(r)]), gossip_atom::value, st.step, st.cfg.rank, mine);
    st.report.bytes_sent += static_cast<std::int64_t>(mine.bytes());
  }
  st.exchanging = true;
  try_mix(self);
}

/// A worker was lost: its neighbours leave it out of their graph, with
/// Metropolis weights over the survivors' graph, and the survivors share
/// out the data among them.
void on_reform(gossip_actor* self, int generation, const std::vector<std::int64_t>& survivors) {
  auto& st = self->state;
  if (redrawn(st)) { // every graph from here on leaves the lost out
    if (!st.reshard_among(st.generation, generation, survivors))
      return;
    st.gone.assign(static_cast<std::size_t>(st.cfg.world), true);
    for (auto r : survivors)
      if (r >= 0 && r < st.cfg.world)
        st.gone[static_cast<std::size_t>(r)] = false;
    st.drawn.clear();
    try_mix(self);
    return;
  }
  const auto me = std::find(survivors.begin(), survivors.end(), static_cast<std::int64_t>(st.cfg.rank));
  if (generation <= st.generation || me == survivors.end() || st.cfg.gossip.whole_graph.empty())
    return;
  st.generation = generation;
  const auto alive = [&](int r) { return std::find(survivors.begin(), survivors.end(), r) != survivors.end(); };
  const auto degree = [&](int j) {
    std::size_t d = 0;
    for (int k : st.cfg.gossip.whole_graph[static_cast<std::size_t>(j)])
      d += alive(k) ? 1 : 0;
    return d;
  };
  std::vector<int> graph;
  for (int j : st.cfg.gossip.links)
    if (alive(j))
      graph.push_back(j);
    else {
      st.mixers.erase(j);
      if (st.squeeze)
        st.squeeze->drop(j);
    }
  st.cfg.gossip.mix_weights = metropolis_weights(graph, degree);
  st.cfg.gossip.links = std::move(graph);
  st.reshard(static_cast<int>(me - survivors.begin()), static_cast<int>(survivors.size()), generation);
  if (!adpsgd(st))
    try_mix(self); // a step waiting for the lost neighbour completes
}

/// AD-PSGD: starts stepping once every neighbour's mixer is known.
void start_when_ready(gossip_actor* self) {
  auto& st = self->state;
  if (st.started || st.cfg.gossip.neighbours.empty())
    return;
  if (adpsgd(st))
    for (int r : st.cfg.gossip.links)
      if (st.mixers.count(r) == 0)
        return;
  st.started = true;
  begin_step(self);
}

/// D-PSGD with compression.kind: the rule's state, from a checkpoint
/// and into the next.
void init_compression(gossip_actor* self) {
  auto& st = self->state;
  if (st.cfg.compress.mode == models::compress_mode::none || adpsgd(st) || st.cfg.gossip.links.empty())
    return;
  auto spec = st.cfg.compress;
  spec.seed = st.cfg.seed;
  st.squeeze = std::make_unique<models::compressed_gossip>(spec, st.cfg.gossip.rule, st.cfg.gossip.consensus_lr,
                                                           st.model->size(), st.cfg.gossip.links);
  if (st.cfg.resume)
    st.squeeze->restore(st.cfg.resume->f("gossip_estimates"));
  st.save_extra = [self](snapshot& s) { s.put("gossip_estimates", self->state.squeeze->saved()); };
}

/// A neighbour's D-PSGD parameters (or payload) for `step`: false, with a
/// warning, when they cannot be mixed.
bool acceptable(gossip_state& s, std::int64_t step, int rank, const slice& theirs) {
  std::string why;
  // A worker runs at most the graph's diameter, below the worker count,
  // steps ahead of another: a later step is a bad peer's, refused before
  // its graph is drawn or its parameters kept.
  if (step < s.step || step > s.step + s.cfg.world || !neighbour_at(s, step, rank))
    why = "not a neighbour at that step, or a step past or too far ahead";
  else if (!s.squeeze && static_cast<std::size_t>(theirs.numel()) != s.model->size())
    why = "expected " + std::to_string(s.model->size()) + " values";
  else if (s.squeeze)
    try {
      s.squeeze->check(words_of(theirs).data(), static_cast<std::size_t>(theirs.numel()));
    } catch (const gradwire::error& e) {
      why = e.what();
    }
  if (!why.empty())
    log::warn("{}D-PSGD: parameters from rank {} (step {}, {} values) refused: {}", s.who(), rank, step,
              theirs.numel(), why);
  return why.empty();
}

caf::behavior gossip_behavior(gossip_actor* self, worker_config cfg) {
  auto& st = self->state;
  const bool started = start_worker(self, std::move(cfg), [self] {
    auto& s = self->state;
    check(s.cfg.gossip.mix_weights.size() == s.cfg.gossip.links.size() + 1, "gossip weights do not match the graph");
    s.pick.seed(s.cfg.seed * 104729 + static_cast<std::uint64_t>(s.cfg.rank));
    init_compression(self);
  });
  if (!started)
    return {};
  if (adpsgd(st))
    try {
      start_adpsgd(self);
    } catch (const gradwire::error& e) {
      st.finish(self, st.who() + e.what());
      return {};
    }
  st.start_heartbeats(self);
  return behavior_with_controls<gossip_worker_actor>(
    self, [=] { finish_gossip(self); }, [=] { begin_step(self); },
    [=](wire_atom, std::vector<caf::actor> all) { // every worker's handle, by rank: start
      auto& s = self->state;
      s.cfg.gossip.neighbours = std::move(all);
      if (adpsgd(s)) // tell the neighbours where to average with this worker
        for (int r : s.cfg.gossip.links)
          self->send(as_gossip_worker(s.cfg.gossip.neighbours[static_cast<std::size_t>(r)]), mixer_atom::value, s.cfg.rank, s.mixer);
      start_when_ready(self);
    },
    [=](beat_atom) { self->state.on_beat(self); },
    [=](reform_atom, int generation, std::vector<std::int64_t> survivors) { on_reform(self, generation, survivors); },
    [=](gossip_atom, std::int64_t step, int rank, slice theirs) { // D-PSGD
      auto& s = self->state;
      if (!acceptable(s, step, rank, theirs))
        return;
      s.report.bytes_received += static_cast<std::int64_t>(theirs.bytes());
      auto& got = s.inbox[step];
      for (const auto& g : got)
        if (g.first == rank) { // twice for one step: the mix would miss another neighbour
          log::warn("{}D-PSGD: a second set of parameters from rank {} for step {} refused", s.who(), rank, step);
          return;
        }
      got.emplace_back(rank, std::move(theirs));
      try_mix(self);
    },
    [=](mixer_atom, int rank, caf::actor mixer) { // AD-PSGD: a neighbour's mixer
      on_mixer(self, rank, std::move(mixer), [self] { start_when_ready(self); });
    },
    [=](turn_atom) { on_turn(self); });
}

} // namespace
} // namespace gossip_detail

std::vector<float> metropolis_weights(const std::vector<int>& neighbours, const std::function<std::size_t(int)>& degree) {
  std::vector<float> w;
  float rest = 1.f;
  for (int j : neighbours) {
    w.push_back(1.f / static_cast<float>(1 + std::max(neighbours.size(), degree(j))));
    rest -= w.back();
  }
  w.push_back(rest);
  return w;
}

caf::actor spawn_gossip_worker(caf::actor_system& sys, worker_config cfg) {
  if (cfg.vclock) // one event at a time on the simulation's scheduler: no thread of its own
    return sys.spawn(gossip_detail::gossip_behavior, std::move(cfg));
  return sys.spawn<caf::detached>(gossip_detail::gossip_behavior, std::move(cfg));
}

} // namespace gradwire::actors
