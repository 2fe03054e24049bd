#pragma once
/// @file checked_behavior.hpp
/// An untyped actor's behavior checked by the compiler against a typed
/// protocol: built as the protocol's typed_behavior, so that a handler
/// missing, one too many, or one that takes a message's payload as another
/// type fails to compile (CAF's "not enough message handlers", "too many
/// message handlers", "unexpected handler at index N"), then handed over
/// as a plain behavior. For the actors whose shared code takes
/// caf::event_based_actor* (the workers, the ring peer, virtual time's
/// reformer): their senders hold the typed handle, and now their handlers
/// are checked against the same list (protocol_misuse.sh).

#include <caf/all.hpp>

#include <utility>

namespace gradwire::actors {

template <class Handle, class... Handlers>
caf::behavior checked_behavior(Handlers... handlers) {
  typename Handle::behavior_type typed{std::move(handlers)...};
  return std::move(typed.unbox());
}

} // namespace gradwire::actors
