#pragma once
/// @file refuse.hpp
/// What an actor does with a message none of its handlers takes: a message
/// of the wrong signature, a stale one, or one from a hostile peer. It is
/// refused (a request gets caf::sec::unexpected_message back) and logged
/// with the actor's name, never dropped in silence and never fatal.

#include <caf/all.hpp>

#include <cstdint>
#include <string>

namespace gradwire::actors {

/// How many refusals an actor logs before it only counts them: a flood of
/// stray messages must not flood the log.
inline constexpr int refusals_logged = 10;

/// Makes `self` refuse and log what it has no handler for; `who` names it
/// in the log ("worker 2", "shard 0").
void refuse_unexpected(caf::scheduled_actor* self, std::string who);

/// The log line for a refused message (for tests and the handler).
std::string refusal_text(const std::string& who, const std::string& rendered);

/// An error's words for a person: the text an actor gave it (a shard's
/// "shard 0: ..."), as written, else CAF's rendering of it.
std::string error_text(caf::actor_system& sys, const caf::error& err);

} // namespace gradwire::actors
