#pragma once
/// @file shm_collective.hpp
/// The collective communicator's allreduce among ranks that all share
/// this host, through shared memory and nothing else: no UCX, no FIFO
/// copies, no messages. Each rank owns a segment of POSIX shared memory
/// that it alone writes and its peers map read-only (two halves used in
/// turn, and a header of counters).
///
/// The buffer is cut as the ring cuts it, one segment per rank, and
/// segments are moved in slices that fit a half (pieces). For piece g:
///   1. each rank copies its slices of the other ranks' segments into its
///      half and raises `posted` to g;
///   2. once every peer has posted g, rank r adds its peers' slices of
///      segment r into its own buffer, in the ring's order (r + 1, r + 2,
///      ...), copies the sum into its half and raises `reduced` to g;
///   3. once every peer has reduced g, rank r copies each peer s's sum of
///      segment s from s's half into its own buffer.
/// So a rank writes (p-1)/p of the buffer into shared memory and reads the
/// same back: two copies fewer than passing the ring's messages through
/// UCX's shared-memory FIFOs, and no process ever maps another's private
/// memory (UCX's CMA is not used: see ucx_comm.hpp). Every element is the
/// sum the ring makes, in the ring's order: the result is the ring's, bit
/// for bit, on every rank.
///
/// Below `gather_below_bytes` one wait replaces the two: every rank posts
/// its whole buffer and adds every segment itself, in the ring's order.
///
/// A group of the communicator's ranks (those on one host of several) sums
/// the same way; with `across`, each rank hands its segment's host sum
/// (its slice of each piece; below gather_below_bytes, the whole buffer)
/// to `across` before publishing it, which adds the other hosts' sums of
/// the same floats in place (ucx_comm: an allreduce among the ranks of
/// this local index on every host). So every host moves 1/L of the buffer
/// per rank across the network, and every rank ends with the same bits.
/// On hosts of unequal rank counts the buffer is cut in S segments, S
/// the smallest host's count, owned by the group's first S ranks (the
/// others post their slices and read the sums back), and every size is
/// scattered: every host cuts alike, so the calls to `across` match.
///
/// A half is reused two pieces later; by then every peer has posted the
/// piece between, so it has finished reading it. A peer that falls silent
/// for `timeout_ms`, or that calls with another size, is named in a
/// gradwire::error; its counters and floats are only compared and added,
/// never used as sizes or offsets.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gradwire::transport {

class shm_allreduce {
public:
  /// The floats of one half: a piece's slices of every segment.
  static constexpr std::size_t half_floats = std::size_t{1} << 18; // 1 MiB
  /// Buffers below this many bytes are gathered whole (one wait, not two).
  static constexpr std::size_t gather_below_bytes = std::size_t{16} << 10;
  /// The most ranks: each rank's slice of a half is 64 floats at least.
  static constexpr int max_ranks = 4096;
  static_assert(gather_below_bytes / sizeof(float) <= half_floats);

  /// Creates this rank's segment (allocated now: a full /dev/shm is an
  /// error here). Throws gradwire::error.
  shm_allreduce(int rank, int size, int timeout_ms, bool spin_yield);
  ~shm_allreduce();
  shm_allreduce(const shm_allreduce&) = delete;
  shm_allreduce& operator=(const shm_allreduce&) = delete;

  /// This rank's segment, for its peers' connect().
  const std::string& name() const;
  /// Maps rank r's segment, named `names[r]` (this rank's own entry is
  /// ignored), read-only, and checks what its header says. Throws
  /// gradwire::error naming the rank.
  void connect(const std::vector<std::string>& names);
  /// The same for a group: the sums run among `members` (the
  /// communicator's ranks, ascending, this one among them); names[r] is
  /// read for the members only. The first `owners` members (1 to all)
  /// own a segment each; `gather_small`: below gather_below_bytes every
  /// rank sums the whole buffer instead (owners must then be all).
  void connect(const std::vector<std::string>& names, const std::vector<int>& members, int owners, bool gather_small);
  /// The slices [a, b) of segment `s` of n floats cut in `owners`
  /// segments, piece by piece, as the scattered sums hand them to
  /// `across` (a rank alone on its host calls across the same way).
  static void each_slice(std::size_t n, int owners, int s, const std::function<void(std::size_t, std::size_t)>& fn);
  /// The most calls to `across` any rank makes for n floats cut in
  /// `owners` segments (owners' counts differ where a slice is empty).
  static std::size_t pieces(std::size_t n, int owners);
  /// Makes a wait in allreduce, now or later, fail at once (any thread):
  /// the job lost a rank, and its peers must not wait out their timeout.
  void abort();

  /// Removes this rank's segment from /dev/shm (peers that mapped it keep
  /// it); after the first allreduce every peer has.
  void unlink();

  /// Adds the other hosts' sums of data[0..n) into it, in place, the
  /// same bits on every rank of its group (see the file's head).
  using across_fn = std::function<void(float* data, std::size_t n)>;
  /// Sums data[0..n) across every rank of the group in place (every rank
  /// calls with the same n), and with `across` across hosts. Throws
  /// gradwire::error naming a silent or mismatched rank; the communicator
  /// is unusable after that.
  void allreduce(float* data, std::size_t n, const across_fn& across = {});

  struct impl;

private:
  std::unique_ptr<impl> p_;
};

} // namespace gradwire::transport
