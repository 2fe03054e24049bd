#pragma once
/// @file gossip_mixer.hpp
/// AD-PSGD's passive side (Lian et al. 2018). A worker's gossip variable
/// x_i lives in a store it shares with its mixer, an actor of its own. The
/// worker copies x_i to compute a gradient; meanwhile neighbours average
/// into x_i through the mixer, which answers at once instead of waiting
/// for the worker's step to end. The gradient, taken at the copy, is then
/// applied to x_i as it is by then.

#include "actors/messages.hpp"

#include <caf/all.hpp>

#include <memory>
#include <mutex>

namespace gradwire::actors {

struct gossip_store {
  std::mutex mu;
  slice x;
  bool closed = false; ///< the worker has finished: no more averaging
};

/// x <- (x + theirs) / 2.
void average_into(slice& x, const slice& theirs);

/// The mixer of `store`: to (gossip_atom, rank, theirs) it replies with
/// x_j, then sets x_j = (x_j + theirs) / 2; a closed store or a wrong size
/// is an error to the sender.
caf::actor spawn_gossip_mixer(caf::actor_system& sys, std::shared_ptr<gossip_store> store);

} // namespace gradwire::actors
