#pragma once
/// @file worker.hpp
/// The three ways a worker exchanges with others; each is a detached actor
/// (its own thread), so computing never holds up the scheduler threads
/// that deliver other actors' messages, and each reports (done_atom,
/// worker_report) when it finishes or fails. Every wait has a timeout; a
/// missing reply ends the worker with an error naming what it waited for.
///
/// - spawn_worker: parameter server. Each step it pulls every shard's
///   slice, computes the gradient of one batch, and pushes each shard its
///   slice of the gradient. In local SGD it instead steps its own replica
///   and exchanges parameters every few steps.
/// - spawn_ring_worker: data parallel with a ring allreduce. It hands its
///   gradient buckets to its ring peer (during backward with overlap) and
///   applies the optimizer to the averaged pieces; replicas stay identical.
/// - spawn_compressed_worker: data parallel with a compressed gradient
///   (compression.kind): every worker sends its payload to every other
///   and decodes all of them in rank order; replicas stay identical.
/// - spawn_streaming_worker: Streaming DiLoCo (ps_options::streaming):
///   local SGD or DiLoCo whose parameters go to the shards fragment by
///   fragment on staggered schedules, each exchange overlapping
///   sync_delay inner steps.
/// - spawn_gossip_worker: decentralised. It steps its own replica, then
///   averages parameters with its graph neighbours (D-PSGD, in lock step)
///   or with one random neighbour (AD-PSGD, asynchronous and pairwise).

#include "actors/worker_core.hpp"

namespace gradwire::actors {

/// D-PSGD's Metropolis-Hastings weights: w_ij = 1 / (1 + max(d_i, d_j)) for
/// each neighbour j, in order (d_i: their count; d_j = degree(j)), then
/// w_ii = 1 - their sum.
std::vector<float> metropolis_weights(const std::vector<int>& neighbours, const std::function<std::size_t(int)>& degree);

/// Spawns a detached worker that starts at once and reports when done.
caf::actor spawn_worker(caf::actor_system& sys, worker_config cfg);
caf::actor spawn_ring_worker(caf::actor_system& sys, worker_config cfg);
caf::actor spawn_gossip_worker(caf::actor_system& sys, worker_config cfg);
caf::actor spawn_compressed_worker(caf::actor_system& sys, worker_config cfg);
caf::actor spawn_streaming_worker(caf::actor_system& sys, worker_config cfg);

} // namespace gradwire::actors
