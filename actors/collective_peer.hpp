#pragma once
/// @file collective_peer.hpp
/// A ring worker's peer that sums its buckets through a collective
/// communicator (across processes: transport::ucx_comm's shared-memory
/// sums on one host, TCP lanes or UCX between hosts) instead of passing
/// chunks round a ring of actors. It speaks the ring peer's protocol to
/// its worker: (reduce_atom, round, bucket, view, scale) in, (reduced_atom,
/// round, bucket, pieces, wait) or (reduced_atom, round, error) out, so a
/// worker hands buckets over during backward and applies them as they come
/// back, the same with either peer.
///
/// The peer runs on its own thread (detached): each allreduce blocks it,
/// not the worker, which goes on computing the next buckets. Every rank's
/// peer sums the same buckets in the same order (backward's), which the
/// communicator requires. The sum is in the communicator's order: every
/// replica gets the same bits, which equal a ring of actors' at 2 ranks
/// (a + b either way) and differ from it in the last bits at 3 or more.

#include "actors/messages.hpp"
#include "actors/reduce_protocol.hpp"
#include "actors/trace.hpp"

#include <caf/all.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace gradwire::actors {

struct collective_peer_config {
  int rank = 0;
  /// Sums data[0..n) across every rank in place; throws gradwire::error
  /// when a rank fails. Called on the peer's thread only.
  std::function<void(float* data, std::size_t n)> allreduce;
  /// The worker's buckets: [begin, end) of the parameter buffer.
  std::vector<std::pair<std::size_t, std::size_t>> buckets;
  std::shared_ptr<tracer> trace; ///< track "ring peer <rank>": one span per bucket
};

reducer_actor spawn_collective_peer(caf::actor_system& sys, collective_peer_config cfg);

} // namespace gradwire::actors
