#pragma once
/// @file ring_peer.hpp
/// A ring peer: the actor that runs its worker's allreduce while the worker
/// computes (an event-based actor on the scheduler's threads, so chunks
/// keep moving while the detached worker is inside backward).
///
/// flat:         one ring over all workers (ring_allreduce.hpp).
/// hierarchical: a ring within each group sums the group's gradients; the
///               group leaders (position 0 in each group) allreduce those
///               sums on a second ring, and each leader sends the result to
///               its group's peers. Intra-group traffic stays in the group
///               and only one peer per group crosses groups (as NCCL's and
///               Horovod's hierarchical allreduce between nodes).
///
/// Messages: (peer_wire_atom, right, leader_right, group peers) once; from the
/// worker (reduce_atom, round, bucket, view, scale), answered per bucket
/// with (reduced_atom, round, bucket, pieces, wait seconds), or
/// (reduced_atom, round, error text) when the protocol breaks.

#include "actors/messages.hpp"
#include "actors/trace.hpp"
#include "actors/virtual_clock.hpp"

#include <caf/all.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace gradwire::actors {

struct ring_peer_config {
  int rank = 0, world = 1;
  std::vector<std::pair<std::size_t, std::size_t>> buckets;
  std::size_t chunk_floats = 65536;
  /// Hierarchical: this peer's position in its group and the group's size,
  /// the number of groups and this group's index. Flat: one group of all.
  int group_pos = 0, group_size = 1, groups = 1, group = 0;
  bool hierarchical = false;
  /// Flat only: the direct algorithm (ring_allreduce::set_direct); the
  /// wiring's members are then every peer by rank.
  bool direct = false;
  /// Flat only: chunks cross as bf16 (ring_allreduce::set_wire_bf16).
  bool wire_bf16 = false;
  std::shared_ptr<tracer> trace; ///< track "ring peer <rank>"; null: none
  std::int64_t first_round = 0; ///< a resumed run's first step
  std::shared_ptr<virtual_clock> vclock; ///< virtual time: waits and spans on it (null: real time)
};

caf::actor spawn_ring_peer(caf::actor_system& sys, const ring_peer_config& cfg);

/// The groups of a hierarchical ring: every rank's group, by rank (equal
/// numbers: one group; any numbers, such as hosts'); empty: one flat
/// ring. Groups take the order of their lowest rank (the leaders' ring
/// in that order), a group's ranks ascending, its leader the lowest:
/// groups may differ in size and need not be consecutive ranks.
using ring_groups = std::vector<int>;

/// Groups of `group_size` consecutive ranks among `n` (the last may be
/// smaller); group_size 0: flat (empty).
ring_groups consecutive_groups(int n, int group_size);

/// Peer `r`'s configuration among `n` in `groups` (empty: one flat ring).
/// Throws gradwire::error when `groups` does not name one group per rank.
ring_peer_config ring_peer_layout(int r, int n, const std::vector<std::pair<std::size_t, std::size_t>>& buckets,
                                  std::size_t chunk_floats, const ring_groups& groups);

/// Whom peer `r` sends to, as ranks: its right neighbour in its ring; a
/// group leader also its right neighbour in the leaders' ring and its
/// group's other members (-1 / empty otherwise).
struct ring_peer_links {
  int right = -1, leader_right = -1;
  std::vector<int> members;
};
ring_peer_links ring_peer_wiring(int r, int n, const ring_groups& groups);

/// Spawns and wires the peers of `n` workers: one flat ring (`groups`
/// empty) or a ring in each group with a ring of group leaders. Returns
/// them by rank.
/// Virtual time: `vclock` is each peer's clock, and `place(peer, rank)`
/// returns the handle the others must use for it (virtual_time.hpp).
std::vector<caf::actor> spawn_ring_peers(caf::actor_system& sys, int n,
                                         const std::vector<std::pair<std::size_t, std::size_t>>& buckets,
                                         std::size_t chunk_floats, const ring_groups& groups,
                                         std::shared_ptr<tracer> trace = {}, bool direct = false,
                                         std::int64_t first_round = 0, std::shared_ptr<virtual_clock> vclock = {},
                                         const std::function<caf::actor(const caf::actor&, int)>& place = {});

} // namespace gradwire::actors
