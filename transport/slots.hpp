#pragma once
/// @file slots.hpp
/// Every reserved slot of a process, named once (as CAF's BASP header names
/// its reserved ids). A slot is where a process publishes an actor for the
/// other processes (node::publish); a remote actor is addressed as (rank,
/// slot). Wirings, the job barrier and the transport's own heartbeat take
/// their slots from here; no other file spells a slot number.
///
/// | slots | what | published by |
/// |---|---|---|
/// | 0 | heartbeat (liveness frames, no actor behind it) | transport/node.cpp |
/// | 1 | job barrier root (rank 0) | scheduler runtime: job |
/// | 2 | coordinator (rank 0) | scheduler runtime: every wiring |
/// | 3 | fence: "you are cut off" from rank 0 (no actor behind it) | transport/node.cpp |
/// | 10 | this process's worker | scheduler runtime: every wiring |
/// | 11 | this process's ring peer | ring and hierarchical wirings |
/// | 4096 + i | parameter-server shard i (i < 1024) | parameter-server wiring |
/// | 8192 + k | allreduce benchmark peer for size k (k < 1024) | gradwire bench allreduce |
/// | 65536 .. 2^24 - 1 | free: applications and tests | |
/// | 2^24 .. | actors named only inside messages (assigned by node) | transport/node.cpp |

#include <cstdint>
#include <stdexcept>
#include <string>

namespace gradwire::transport::slots {

constexpr std::uint32_t heartbeat = 0;
constexpr std::uint32_t barrier = 1;
constexpr std::uint32_t coordinator = 2;
constexpr std::uint32_t fence = 3;
constexpr std::uint32_t worker = 10;
constexpr std::uint32_t ring_peer = 11;
constexpr std::uint32_t shard_base = 4096;
constexpr std::uint32_t bench_peer_base = 8192;
constexpr std::uint32_t max_indexed = 1024; ///< shards, benchmark sizes
/// First slot free for applications and tests.
constexpr std::uint32_t user_base = 65536;
/// First slot node assigns to actors that travel inside messages.
constexpr std::uint32_t dynamic_base = 1u << 24;

namespace detail {
inline std::uint32_t indexed(std::uint32_t base, int i, const char* what) {
  if (i < 0 || static_cast<std::uint32_t>(i) >= max_indexed)
    throw std::out_of_range(std::string(what) + " " + std::to_string(i) + " has no slot (0 to " +
                            std::to_string(max_indexed - 1) + ")");
  return base + static_cast<std::uint32_t>(i);
}
} // namespace detail

/// Parameter-server shard `i`'s slot (on the rank that holds it).
inline std::uint32_t shard(int i) { return detail::indexed(shard_base, i, "shard"); }
/// The allreduce benchmark's peer for its `k`-th message size.
inline std::uint32_t bench_peer(int k) { return detail::indexed(bench_peer_base, k, "benchmark size"); }
/// A slot free for applications and tests: user_base + i.
constexpr std::uint32_t user(std::uint32_t i) { return user_base + i; }

} // namespace gradwire::transport::slots
