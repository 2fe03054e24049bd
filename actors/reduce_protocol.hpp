#pragma once
/// @file reduce_protocol.hpp
/// The typed protocols of a ring worker's allreduce peers (messages.hpp's
/// table gives each message's meaning). A worker holds a reducer_actor:
/// either peer takes its buckets and answers each with a message to the
/// worker, (reduced_atom, round, bucket, pieces, wait) or (reduced_atom,
/// round, error text). The collective peer (collective_peer.hpp) is typed
/// so and takes buckets only. The ring of actors' peer (ring_peer.hpp)
/// also takes its wiring, its neighbours' chunks and, in a hierarchical
/// ring, its leader's broadcast; those are checked at run time, since its
/// ring code (ring_allreduce.hpp) also runs inside untyped ring workers.

#include "actors/messages.hpp"

#include <caf/all.hpp>

#include <cstdint>

namespace gradwire::actors {

/// (reduce_atom, round, bucket, view, scale): sum this bucket of the
/// worker's gradient across the ring, then scale it.
using reducer_actor = caf::typed_actor<caf::reacts_to<reduce_atom, std::int64_t, int, slice, float>>;

/// A ring or collective peer reached through an untyped handle (the ring
/// peer's spawn, a placed actor in virtual time): the cast is unchecked,
/// so `a` must be one of the two (or null: no peer).
inline reducer_actor as_reducer(const caf::actor& a) { return caf::actor_cast<reducer_actor>(a); }

} // namespace gradwire::actors
