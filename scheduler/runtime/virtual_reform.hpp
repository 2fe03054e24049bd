#pragma once
/// @file virtual_reform.hpp
/// An elastic ring's re-form in virtual time. In a real run the coordinator
/// runs it (coordinator_elastic.cpp): it asks the survivors to abandon the
/// round, takes the furthest step, has a survivor behind take a live peer's
/// state, and rewires the ring; a worker coming back is let in the same
/// way. The coordinator's thread is outside the simulation, so in virtual
/// time the reformer, an actor placed on worker 0's host, runs the same
/// protocol (reform_decision.hpp: the survivors behind take their state
/// from the donors in turn, straight). Its messages cross the modelled network, so a run re-forms at
/// the same virtual times and with the same bits on any number of threads.
///
/// - A kill (simulation::lose_worker) sends it (lost_atom, the killed
///   worker's report): a
///   re-form of the live workers, with a fresh generation. A kill during a
///   re-form starts it again with the new survivors.
/// - train.restarts: a killed rank comes back as a new process while
///   restarts are left. It asks `restart_s` after its kill (a timer in
///   virtual time), and the ring lets it in at once, as the coordinator
///   does a knock: a re-form with it, abandoning the round in flight. The
///   reformer spawns and places the replacement (`respawn`, a new worker
///   joining at step 0); it is the one behind and takes a survivor's state.
/// - With a [[faults]] back_at_step S it comes back at S instead: once the
///   ring has re-formed without it, the survivors hold at S (hold_at_atom)
///   and say so (paused_atom), then it is let in (at once if the ring is
///   at S already).
/// - The coordinator, which only records in virtual time, is told the
///   ring's recovery (reformed_atom) and each rejoin (rejoined_atom).

#include "actors/coordinator_protocol.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

namespace gradwire::actors {
class virtual_clock;
}

namespace gradwire::scheduler {

struct virtual_reform_plan {
  std::vector<int> host_of; ///< each rank's host (a survivor behind takes its state from a donor there if it can)
  int restarts = 0;      ///< train.restarts: new processes, in all
  double restart_s = 2;  ///< virtual seconds from a kill to its new process asking back in
  /// A killed rank's replacement joins at this step (each used once).
  std::map<int, std::int64_t> back_at_step;
  caf::actor coordinator;
  /// Spawns and places rank's replacement, a ring worker joining
  /// (worker_config::joining) whose re-forms go to `reformer`.
  std::function<caf::actor(int rank, const caf::actor& reformer)> respawn;
  std::shared_ptr<actors::virtual_clock> clock;
};

/// The reformer's messages: a ring's re-form from its workers
/// (actors::reformer_actor), its wiring (wire: every worker's placed
/// handle by rank, its own placed handle), a kill (lost: the killed
/// worker's report, of which it reads the rank) and a replacement's
/// request to come back (knock: rank).
using virtual_reformer_actor = actors::reformer_actor::extend<
  caf::reacts_to<actors::wire_atom, std::vector<caf::actor>, caf::actor>,
  caf::reacts_to<actors::lost_atom, actors::worker_report>, caf::reacts_to<actors::knock_atom, int>>;

/// The reformer reached through its untyped (placed) handle: unchecked.
template <typename A>
virtual_reformer_actor as_virtual_reformer(const A& a) {
  return caf::actor_cast<virtual_reformer_actor>(a);
}

/// The reformer, not yet placed; it starts on (wire_atom, every worker's
/// placed handle by rank, its own placed handle).
caf::actor spawn_virtual_reformer(caf::actor_system& sys, virtual_reform_plan plan);

} // namespace gradwire::scheduler
