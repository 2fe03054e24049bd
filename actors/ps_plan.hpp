#pragma once
/// @file ps_plan.hpp
/// What the parameter server's wiring (scheduler/runtime/ps_wiring.cpp)
/// and a run's checks need to know of the rules its options choose: each
/// fact named once, from the same reading of ps_options that picks the
/// shards' rule (ps_plan_of, in server_rules.cpp beside make_server_rule),
/// so that the wiring consults no predicate of ps_options itself.

#include "actors/topology_options.hpp"

#include <cstdint>

namespace gradwire::actors {

struct ps_plan {
  /// Each push is an update of its own (an async server, async DiLoCo):
  /// the shards' lr schedule counts pushes, `experiment.record` keeps their
  /// order, and spread shards can be rebuilt on rank 0 when their rank is
  /// lost (nothing else fixes the order of updates to rebuild them from).
  bool per_push = false;
  /// No version waits for any worker (per_push without an SSP bound):
  /// across processes the job carries on without a failed worker's process.
  bool waits_for_none = false;
  /// Steps a version stands for when each version holds a push of every
  /// worker (sync without backup workers: 1; local SGD and sync DiLoCo:
  /// local_steps); 0 where versions are not steps (per push, or backup
  /// workers' versions, which skip the late).
  std::int64_t steps_per_version = 0;
  /// Every step is one version that every worker pushed to and pulled
  /// (sync, no backup workers, no local steps).
  bool lock_step = false;
  /// Streaming DiLoCo: fragments of whole tensors, each exchanged on its
  /// own schedule by its own worker kind (streaming_worker.cpp).
  bool streaming = false;
  /// The pacing, as summary.json's mode names it: "sync", "ssp" or "async".
  const char* pacing = "sync";
  int backups = 0;         ///< backup workers in effect
  float dc_lambda = 0.f;   ///< DC-ASGD's lambda in effect (0: off)
};

/// The plan of a parameter server with options `ps`.
ps_plan ps_plan_of(const ps_options& ps);

} // namespace gradwire::actors
