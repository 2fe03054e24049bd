#pragma once
/// @file reduce_protocol.hpp
/// The typed protocols of a ring worker's allreduce peers (messages.hpp's
/// table gives each message's meaning). A worker holds a reducer_actor:
/// either peer takes its buckets and answers each with a message to the
/// worker, (reduced_atom, round, bucket, pieces, wait) or
/// (reduce_failed_atom, round, error text). The collective peer (collective_peer.hpp) is typed
/// so and takes buckets only. The ring of actors' peer (ring_peer.hpp)
/// also takes its wiring, its neighbours' chunks and, in a hierarchical
/// ring, its leader's broadcast (ring_peer_actor). Both are spawned
/// untyped, their ring code (ring_allreduce.hpp) running inside untyped
/// ring workers too, so the typed handles are checked at their senders.

#include "actors/messages.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <vector>

namespace gradwire::actors {

/// (reduce_atom, round, bucket, view, scale): sum this bucket of the
/// worker's gradient across the ring, then scale it.
using reducer_actor = caf::typed_actor<caf::reacts_to<reduce_atom, std::int64_t, int, slice, float>>;

/// The ring of actors' peer (ring_peer.hpp): buckets, its wiring
/// (peerwire: right neighbour, its group leader's right, its group's
/// peers), its neighbours' chunks (ring: tag, round, bucket, chunk, hop,
/// data) and, in a hierarchical ring, its leader's broadcast (reduced:
/// round, bucket, pieces, wait).
using ring_peer_actor = reducer_actor::extend<
  caf::reacts_to<peer_wire_atom, caf::actor, caf::actor, std::vector<caf::actor>>,
  caf::reacts_to<ring_atom, int, std::int64_t, int, int, int, slice>,
  caf::reacts_to<reduced_atom, std::int64_t, int, pieces, double>>;

/// A ring peer reached through an untyped handle (its spawn, a peer across
/// processes): unchecked, so `a` must be one.
inline ring_peer_actor as_ring_peer(const caf::actor& a) { return caf::actor_cast<ring_peer_actor>(a); }

/// A ring or collective peer reached through an untyped handle (the ring
/// peer's spawn, a placed actor in virtual time): the cast is unchecked,
/// so `a` must be one of the two (or null: no peer).
inline reducer_actor as_reducer(const caf::actor& a) { return caf::actor_cast<reducer_actor>(a); }

} // namespace gradwire::actors
