#pragma once
/// @file gossip_mixer.hpp
/// AD-PSGD's passive side (Lian et al. 2018). A worker's gossip variable
/// x_i lives in a store it shares with its mixer, an actor of its own. The
/// worker copies x_i to compute a gradient; meanwhile neighbours average
/// into x_i through the mixer, which answers at once instead of waiting
/// for the worker's step to end. The gradient, taken at the copy, is then
/// applied to x_i as it is by then.
///
/// Every event on x_i goes through store_event, under the store's lock:
/// it is recorded (experiment.record, mix_record.hpp) and, in a replay,
/// held until the record says it happened. An actor whose event is not yet
/// due is told (turn_atom) when it is, and tries again; the mixer holds
/// such requests meanwhile. No thread waits, so any schedule of the
/// replay's threads ends in the record's order.

#include "actors/messages.hpp"
#include "actors/mix_record.hpp"

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace gradwire::actors {

/// A replay's order of one store's events (a whole record, checked by
/// check_replayable).
struct mix_gate {
  std::shared_ptr<const mix_record> record;
  std::size_t next = 0; ///< the event due
  /// By rank: the indices of that rank's events, and how many are done.
  std::vector<std::vector<std::size_t>> of_rank;
  std::vector<std::size_t> done_of_rank;
  /// Who waits for the event at an index (the record's size: for the
  /// store to close).
  std::multimap<std::size_t, caf::actor> waiting;
};

/// The gate over `record` (checked: whole, its own events in step order).
mix_gate open_mix_gate(std::shared_ptr<const mix_record> record);

struct gossip_store {
  std::mutex mu;
  slice x;
  bool closed = false; ///< the worker has finished: no more averaging
  std::unique_ptr<mix_record_writer> rec; ///< experiment.record
  std::optional<mix_gate> gate;           ///< gradwire replay
};

/// x <- (x + theirs) / 2.
void average_into(slice& x, const slice& theirs);

/// What store_event did.
enum class turn {
  taken,    ///< the event happened (and was recorded)
  later,    ///< not due yet: `waiter` gets (turn_atom) when the store moves on
  closed,   ///< an average asked of a closed store (the worker has finished)
  diverged, ///< a replay: the record never has this event next (`why`)
};

/// Runs `op` on x under the store's lock when `e` is due (at once outside a
/// replay): `op` gets the event as recorded (a replay's apply may be
/// apply_alone where `e` asked apply_mixed: a reply the run did not wait
/// for). Then records it, and tells whoever waits for the next event.
turn store_event(gossip_store& s, const mix_event& e, const caf::actor& waiter,
                 const std::function<void(slice& x, const mix_event& as_recorded)>& op, std::string* why);

/// The mixer's protocol, checked by the compiler at every sender:
/// (average_atom, rank, step, theirs) -> x_j before the average;
/// (turn_atom): in a replay, the store moved on.
using gossip_mixer_actor = caf::typed_actor<caf::replies_to<average_atom, int, std::int64_t, slice>::with<slice>,
                                            caf::reacts_to<turn_atom>>;

/// A mixer reached through an untyped handle (one a neighbour sent in a
/// mixer_atom message, or virtual time's placed actor): the cast is
/// unchecked, so the far end must be a mixer.
inline gossip_mixer_actor as_mixer(const caf::actor& a) { return caf::actor_cast<gossip_mixer_actor>(a); }

/// The mixer of `store`: to (average_atom, rank, step, theirs) it replies
/// with x_j, then sets x_j = (x_j + theirs) / 2; a closed store or a wrong
/// size is an error to the sender.
gossip_mixer_actor spawn_gossip_mixer(caf::actor_system& sys, std::shared_ptr<gossip_store> store);

} // namespace gradwire::actors
