#pragma once
/// @file gossip_worker_state.hpp
/// Inside the gossip worker (gossip_worker.cpp: D-PSGD and the step;
/// adpsgd_worker.cpp: AD-PSGD's exchanges through its store).

#include "actors/gossip_mixer.hpp"
#include "actors/worker_core.hpp"
#include "models/compressed_gossip.hpp"

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

namespace gradwire::actors::gossip_detail {

struct gossip_state : worker_core {
  /// D-PSGD: neighbours' parameters by step (a neighbour may be one step ahead).
  std::map<std::int64_t, std::vector<std::pair<int, slice>>> inbox;
  bool exchanging = false;
  std::mt19937_64 pick;
  /// AD-PSGD: this worker's x_i and mixer; the neighbours' mixers, by rank;
  /// the neighbour picked this step.
  std::shared_ptr<gossip_store> store;
  caf::actor mixer;
  std::map<int, caf::actor> mixers;
  int peer = -1;
  /// AD-PSGD in a replay: what to do once the store's event this worker
  /// waits for is due (turn_atom); empty: it waits for none.
  std::function<void()> on_turn;
  bool started = false;
  int generation = 0; ///< the last reform taken (lost neighbours left out)
  /// D-PSGD with compression.kind: CHOCO-SGD or naive compressed gossip.
  std::unique_ptr<models::compressed_gossip> squeeze;
  /// Graphs redrawn every step (gossip_options::graph_seed): the ranks
  /// lost to the job (left out of every graph), and the graphs of the
  /// steps at hand (this one and later ones whose messages came early: a
  /// worker that is not this one's neighbour for a few steps may run
  /// that many steps ahead).
  std::vector<bool> gone;
  std::map<std::int64_t, std::pair<std::vector<int>, std::vector<float>>> drawn;
  static inline const char* name = "gossip_worker";
};

using gossip_actor = caf::stateful_actor<gossip_state>;

inline bool adpsgd(const gossip_state& st) {
  return st.cfg.gossip.mode == gossip_mode::adpsgd && !st.cfg.gossip.links.empty();
}

/// Ends the step and lets waiting messages in before the next (gossip_worker.cpp).
void next_step(gossip_actor* self);

// AD-PSGD (adpsgd_worker.cpp).

/// The worker's store and mixer, with its record or a replay's gate.
void start_adpsgd(gossip_actor* self);
/// The step's read of x_i into the model, the gradient's point; false:
/// not now (a replay: it waits for its turn, and `again` runs then; or the
/// worker failed).
bool read_x(gossip_actor* self, std::function<void()> again);
/// Averages with one random neighbour's x_j through its mixer, which does
/// the same on its side whatever that neighbour is doing; then applies
/// the step's gradient to x_i and goes on to the next step.
void average_with_one(gossip_actor* self);
/// Closes the store to neighbours and takes x_i as the model; false: not
/// now (as read_x).
bool close_store(gossip_actor* self, std::function<void()> again);
/// AD-PSGD's messages: a neighbour's mixer (kept if it is a neighbour's;
/// then `start`), and a replay's turn (the store's event this worker
/// waits for is due).
void on_mixer(gossip_actor* self, int rank, caf::actor mixer, const std::function<void()>& start);
void on_turn(gossip_actor* self);

} // namespace gradwire::actors::gossip_detail
