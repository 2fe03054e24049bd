#pragma once
/// @file barrier.hpp
/// The job barrier's root: an actor every rank's waiter sends
/// (barrier_atom, epoch, rank, waiter) to. It releases an epoch's waiters
/// once every rank has arrived or is known to have failed (a job that
/// carried on without a worker must still end), the other ranks first.
/// It answers (barrier_missing_atom, epoch) with the ranks not yet there,
/// or, for an epoch it released, that it did (and without which failed
/// ranks): a waiter that timed out on it missed its release.
/// Across processes it is published in transport::slots::barrier on every
/// rank and rank 0's is used (scheduler/runtime/job.hpp).

#include <caf/all.hpp>

#include <functional>
#include <string>

namespace gradwire::actors {

using barrier_atom = caf::atom_constant<caf::atom("barrier")>;
/// Root -> waiter: (release, epoch).
using barrier_release_atom = caf::atom_constant<caf::atom("release")>;
/// Anyone -> root: look again whether failed ranks complete an epoch.
using barrier_recheck_atom = caf::atom_constant<caf::atom("recheck")>;
/// Anyone -> root: (missing, epoch) -> the ranks not arrived, "1, 3".
using barrier_missing_atom = caf::atom_constant<caf::atom("missing")>;

/// The root's protocol, checked by the compiler at every sender. Its
/// waiters are plain actors (a scoped_actor per rank) that take
/// (barrier_release_atom, epoch).
using barrier_actor = caf::typed_actor<caf::reacts_to<barrier_atom, int, int, caf::actor>,
                                       caf::reacts_to<barrier_recheck_atom, int>,
                                       caf::replies_to<barrier_missing_atom, int>::with<std::string>>;

/// The root reached through an untyped handle (a transport proxy): the
/// cast is unchecked, so the far end must be a barrier
/// (transport::slots::barrier).
inline barrier_actor as_barrier(const caf::actor& a) { return caf::actor_cast<barrier_actor>(a); }

struct barrier_config {
  int ranks = 1; ///< ranks that take part
  int me = -1;   ///< this process's rank: its own waiter is released last
  /// Whether a rank is known to have failed (then it is not waited for).
  std::function<bool(int rank)> is_down;
};

barrier_actor spawn_barrier(caf::actor_system& sys, barrier_config cfg);

} // namespace gradwire::actors
