#pragma once
/// @file coordinator_protocol.hpp
/// What the workers tell the run's coordinator (scheduler/runtime/
/// coordinator.cpp) and a ring's reformer (the coordinator, or in virtual
/// time scheduler/runtime/virtual_reform.cpp), as typed handles: every
/// sender's message is checked by the compiler against these lists
/// (messages.hpp's table gives each message's meaning). The coordinator
/// is a blocking actor that receives them; its handle is cast from the
/// untyped one a worker is given (worker_config::report_to), unchecked.

#include "actors/messages.hpp"
#include "actors/snapshot.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <string>

namespace gradwire::actors {

/// A ring's re-form, from its workers: (paused, rank, step) a worker held
/// at that boundary; (abandoned, rank, steps, mid_round) it gave up the
/// round in flight; (adopted, rank, generation) it took the new ring.
using reformer_actor = caf::typed_actor<caf::reacts_to<paused_atom, int, std::int64_t>,
                                        caf::reacts_to<abandoned_atom, int, std::int64_t, bool>,
                                        caf::reacts_to<adopted_atom, int, int>>;

/// The coordinator: the reformer's messages, and each worker's progress
/// (step: rank, steps, samples; metrics: a window's; eval: a replica to
/// evaluate at a step), its end (done, or lost: a report of another rank,
/// with the error), a checkpoint part (snapshot: meta, floats), the
/// replica lost shards are rebuilt from (repstate: meta, floats), a lost
/// rank's process asking back in (knock), and virtual
/// time's re-forms (reformed: rank, step, lost round, seconds, survivors;
/// rejoined: rank, step, seconds).
using coordinator_actor = reformer_actor::extend<
  caf::reacts_to<done_atom, worker_report>, caf::reacts_to<lost_atom, worker_report>,
  caf::reacts_to<step_atom, int, std::int64_t, std::int64_t>,
  caf::reacts_to<eval_atom, std::int64_t, slice, slice>, caf::reacts_to<metrics_atom, step_metrics>,
  caf::reacts_to<snapshot_atom, std::string, slice>, caf::reacts_to<replica_state_atom, std::string, slice>,
  caf::reacts_to<knock_atom, int>,
  caf::reacts_to<reformed_atom, int, std::int64_t, bool, double, int>,
  caf::reacts_to<rejoined_atom, int, std::int64_t, double>>;

/// The coordinator (or a reformer) reached through an untyped handle: the
/// cast is unchecked, so `a` must be one (transport::slots::coordinator
/// across processes).
inline coordinator_actor as_coordinator(const caf::actor& a) { return caf::actor_cast<coordinator_actor>(a); }
inline reformer_actor as_reformer(const caf::actor& a) { return caf::actor_cast<reformer_actor>(a); }

} // namespace gradwire::actors
