#pragma once
/// @file shard_protocol.hpp
/// The parameter-server shard's typed protocol: the messages a shard takes
/// and what it answers to each (actors/ps_shard.hpp implements it). Apart
/// from the shard itself so that workers, the coordinator and checkpoints
/// hold typed handles without the shard's own dependencies.

#include "actors/messages.hpp"
#include "actors/snapshot.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::actors {

/// The shard's protocol (messages.hpp's table gives each message's
/// meaning). Senders hold a shard_actor, so the compiler checks every
/// request and its reply handler against this list at both ends.
///
/// (snapshot_atom, version) -> (meta, floats): the shard's part of a
/// checkpoint (snapshot.hpp) at `version`, kept or awaited; version -1: now.
/// (pin_atom, version): keep `version` (a checkpoint by time will ask for
/// it): its copy is kept until asked for, however late the ask.
using shard_actor = caf::typed_actor<
  caf::replies_to<pull_atom, int, std::int64_t, std::int64_t>::with<std::int64_t, slice, double>,
  caf::replies_to<push_atom, int, std::int64_t, std::int64_t, std::int64_t, slice>::with<std::int64_t, std::int64_t>,
  caf::replies_to<push_pull_atom, int, std::int64_t, std::int64_t, std::int64_t, slice>::with<std::int64_t, std::int64_t,
                                                                                                slice>,
  caf::replies_to<pace_atom, int, std::int64_t, double>::with<std::int64_t>,
  caf::replies_to<snapshot_atom, std::int64_t>::with<std::string, slice>, caf::reacts_to<pin_atom, std::int64_t>,
  caf::reacts_to<reform_atom, int, std::vector<std::int64_t>>,
  caf::replies_to<stats_atom>::with<std::int64_t, histogram, std::int64_t, std::vector<std::int64_t>>,
  caf::replies_to<fetch_atom>::with<std::int64_t, slice>>;

/// A shard reached through an untyped handle (a transport proxy, a placed
/// actor in virtual time, a handle from a message): the cast is unchecked,
/// so a proxy's far end must be a shard (transport::slots::shard).
inline shard_actor as_shard(const caf::actor& a) { return caf::actor_cast<shard_actor>(a); }

} // namespace gradwire::actors
