#pragma once
/// @file worker_protocol.hpp
/// What a worker takes, as typed handles: the controls every worker shares
/// (worker_core.hpp's behavior_with_controls), extended with each family's own
/// messages by typed_actor::extend (messages.hpp's table gives each
/// message's meaning). Every sender to a worker, the worker itself
/// included, sends through one of these, so the compiler checks the
/// message against the receiver's list (protocol_misuse.sh). Each worker's
/// behavior is checked against the same list (checked_behavior.hpp): a
/// handler missing, or one for a message the list lacks, fails to compile.
/// The workers stay untyped actors (the code they share takes
/// caf::event_based_actor*), so each as_* cast is unchecked: `a` must be a
/// worker of that family.

#include "actors/checked_behavior.hpp"
#include "actors/messages.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::actors {

/// Every worker: stop (at the next step boundary), pause (hold at the next
/// boundary), run_to (the last step, then a snapshot), snap_at (a snapshot
/// at that step), and its own timers: tick (the next step), beat (a
/// heartbeat), and computed (virtual time's loop: the step's gradient is
/// done; the loop puts it straight into the mailbox).
using worker_actor =
  caf::typed_actor<caf::reacts_to<stop_atom>, caf::reacts_to<pause_atom>, caf::reacts_to<run_to_atom, std::int64_t>,
                   caf::reacts_to<snapshot_at_atom, std::int64_t>, caf::reacts_to<tick_atom>,
                   caf::reacts_to<beat_atom>, caf::reacts_to<computed_atom>>;

/// (reform, generation, survivors' ranks): go on without the lost, as a
/// parameter-server, streaming or gossip worker does.
using reform_taker = caf::typed_actor<caf::reacts_to<reform_atom, int, std::vector<std::int64_t>>>;

/// (ring, tag, round, bucket, chunk, hop, data): a ring neighbour's chunk,
/// to a ring peer or a worker that runs its ring itself (ring_allreduce.hpp).
using ring_hop_taker = caf::typed_actor<caf::reacts_to<ring_atom, int, std::int64_t, int, int, int, slice>>;

/// A bucket's answer from an allreduce peer (reduce_protocol.hpp): the
/// reduced pieces and the seconds waited (reduced), or the error that
/// ended it (redfailed).
using reduced_taker = caf::typed_actor<caf::reacts_to<reduced_atom, std::int64_t, int, pieces, double>,
                                       caf::reacts_to<reduce_failed_atom, std::int64_t, std::string>>;

/// (wire, right neighbour or null, every worker by rank): a ring's or a
/// compressing ring's wiring; it starts the worker.
using ring_wire_taker = caf::typed_actor<caf::reacts_to<wire_atom, caf::actor, std::vector<caf::actor>>>;

/// (turn): a replay's event this actor waits for is due (a gossip worker
/// or a mixer, gossip_mixer.hpp).
using turn_taker = caf::typed_actor<caf::reacts_to<turn_atom>>;

/// A parameter-server (or local SGD, DiLoCo) worker: also a re-form, a
/// request for its replica (replica: generation) and a rebuilt shard
/// (rebuilt: index, its new handle).
using ps_worker_actor = worker_actor::extend_with<reform_taker>::extend<
  caf::reacts_to<replica_atom, std::int64_t>, caf::reacts_to<rebuilt_atom, int, caf::actor>>;

/// A Streaming DiLoCo worker: also a re-form.
using streaming_worker_actor = worker_actor::extend_with<reform_taker>;

/// A ring worker: its wiring (wire: right neighbour, every worker), its
/// peer's answers, ring chunks, batch balancing's speeds (balance), and
/// an elastic ring's re-form: abandon (generation), rewire (generation,
/// survivors, right neighbour), give (generation, the worker behind),
/// donor (the donor's state: meta, floats) and hold_at (step).
using ring_worker_actor = worker_actor::extend_with<ring_wire_taker, ring_hop_taker, reduced_taker>::extend<
  caf::reacts_to<abandon_atom, int>,
  caf::reacts_to<rewire_atom, int, std::vector<std::int64_t>, caf::actor>, caf::reacts_to<give_atom, int, caf::actor>,
  caf::reacts_to<donor_atom, std::string, slice>, caf::reacts_to<hold_at_atom, std::int64_t>,
  caf::reacts_to<balance_atom, std::int64_t, int, double, double, std::int64_t, std::int64_t>>;

/// A compressing ring worker: its wiring (as a ring worker's), every other
/// worker's payload (gather: step, phase, rank, payload) and ring chunks.
using compressed_worker_actor =
  worker_actor::extend_with<ring_wire_taker, ring_hop_taker>::extend<caf::reacts_to<gather_atom, std::int64_t, int, int, slice>>;

/// A gossip worker: its wiring (wire: every worker by rank), a re-form,
/// D-PSGD's neighbour parameters (gossip: step, rank, snapshot), AD-PSGD's
/// neighbour mixers (mixer: rank, handle) and a replay's turns.
using gossip_worker_actor = worker_actor::extend_with<reform_taker, turn_taker>::extend<
  caf::reacts_to<wire_atom, std::vector<caf::actor>>, caf::reacts_to<gossip_atom, std::int64_t, int, slice>,
  caf::reacts_to<mixer_atom, int, caf::actor>>;

/// The typed handle of a worker reached through an untyped one (a
/// wiring's list of workers, a peer across processes, the worker itself).
/// Unchecked: `a` must be a worker of that kind.
template <typename A>
worker_actor as_worker(const A& a) {
  return caf::actor_cast<worker_actor>(a);
}
template <typename A>
ps_worker_actor as_ps_worker(const A& a) {
  return caf::actor_cast<ps_worker_actor>(a);
}
template <typename A>
ring_worker_actor as_ring_worker(const A& a) {
  return caf::actor_cast<ring_worker_actor>(a);
}
template <typename A>
compressed_worker_actor as_compressed_worker(const A& a) {
  return caf::actor_cast<compressed_worker_actor>(a);
}
template <typename A>
gossip_worker_actor as_gossip_worker(const A& a) {
  return caf::actor_cast<gossip_worker_actor>(a);
}
/// A PS, streaming or gossip worker (or a shard) told of a re-form.
inline reform_taker as_reform_taker(const caf::actor& a) { return caf::actor_cast<reform_taker>(a); }
/// A ring or compressing ring worker, told its neighbours.
inline ring_wire_taker as_ring_wire_taker(const caf::actor& a) { return caf::actor_cast<ring_wire_taker>(a); }
/// A ring peer or a worker running its own ring.
inline ring_hop_taker as_ring_hop_taker(const caf::actor& a) { return caf::actor_cast<ring_hop_taker>(a); }
/// A ring worker, or a ring peer's group member (hierarchical broadcast).
inline reduced_taker as_reduced_taker(const caf::actor& a) { return caf::actor_cast<reduced_taker>(a); }
/// A gossip worker or a mixer waiting for a replay's turn.
inline turn_taker as_turn_taker(const caf::actor& a) { return caf::actor_cast<turn_taker>(a); }

} // namespace gradwire::actors
