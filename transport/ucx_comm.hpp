#pragma once
/// @file ucx_comm.hpp
/// A collective communicator driven by the calling thread, MPI-style: its
/// own UCX context and worker (tag matching), one endpoint per rank, and
/// no progress thread. allreduce() posts its sends and receives and polls
/// the worker itself until they complete: no thread hand-off, no wake-up,
/// no actor mailbox on the path, so a small allreduce costs what the
/// network costs (about a microsecond a hop over shared memory).
///
/// Semantics are MPI_Allreduce's (MPI_SUM on floats, in place): every
/// rank's own buffer holds the sum when the call returns, every rank's bit
/// for bit the same.
///
/// Peers on this host are reached through shared memory only, others
/// through the network only (chosen per pair by host identity). UCX's
/// CMA is never used: UCX 1.13 ends the process when a CMA peer dies
/// mid-transfer. The network is either UCX (InfiniBand, RoCE, or
/// whatever transports.tls names) or the communicator's own TCP lanes
/// (tcp_lanes.hpp), which move 64 KiB to 1 MiB several times faster than
/// UCX 1.13's TCP transport; comm_net picks, per pair.
///
/// Algorithms (as MPICH and Open MPI's tuned module choose them):
/// - recursive doubling: log2(p) exchanges of the whole buffer, each rank
///   adding its partner's; non-powers of two fold the extra ranks into a
///   partner first and get the result back last. Latency-optimal: small
///   messages.
/// - ring: reduce-scatter then all-gather, p-1 steps each of n/p:
///   bandwidth-optimal, large messages.
/// - shared memory (shm_collective.hpp): when every rank is on this host,
///   each adds its segment of the others' buffers from shared memory it
///   maps from them, the ring's sums without its messages. Every size.
/// - hierarchical: 2 or more hosts, some of 2 or more ranks
///   (comm_hosts.hpp). Within a host the shared-memory sums, cut in S
///   segments, S the smallest host's rank count; local rank l < S adds
///   the other hosts' sums of segment l among the ranks of index l on
///   every host (recursive doubling or the ring, as for that many ranks),
///   then publishes it to its host; a host's further ranks only post and
///   read. A rank alone on its host sums across hosts only (S is 1 then:
///   one rank per host carries it, as Horovod's hierarchical allreduce
///   does). Each host sends the buffer's bytes across once per exchange,
///   not once per rank, and every rank ends with the same bits. Every size.
/// choose() picks by path, size and rank count (measured: bench/RESULTS.md).
///
/// Everything from a peer is checked: a message of the wrong length, or
/// from a rank that falls silent for `timeout_ms`, throws gradwire::error
/// naming the rank and step, and leaves the communicator unusable (never
/// a hang, never memory written out of range).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gradwire::transport {

enum class allreduce_algo { automatic, recursive_doubling, ring, halving_doubling, shared_memory, hierarchical };

/// How pairs that would talk TCP are carried. automatic: the
/// communicator's own TCP lanes for every pair UCX would carry over TCP
/// (other hosts, unless the tls names an RDMA transport or UCX's choice
/// would find an RDMA device; and every pair when the tls is TCP only);
/// ucx: always UCX; sockets: lanes for every pair, shared memory too.
enum class comm_net { automatic, ucx, sockets };
/// "auto", "ucx", "sockets"; throws gradwire::error naming `what`.
comm_net parse_comm_net(const std::string& text, const std::string& what);
const char* to_string(comm_net n);

/// "auto", "rd" / "recursive-doubling", "ring", "rabenseifner", "shm", "hier"; throws gradwire::error naming `what`.
allreduce_algo parse_allreduce_algo(const std::string& text, const std::string& what);
const char* to_string(allreduce_algo a);

struct comm_options {
  std::string tls;         ///< UCX transports ("" = UCX_TLS or UCX's choice)
  /// Give the CPU up (sched_yield) between empty polls: ranks that share
  /// CPUs (Open MPI's mpi_yield_when_idle).
  bool spin_yield = false;
  int timeout_ms = 60000;  ///< a peer silent this long in a collective: error
  /// Poll lanes this long without progress before sleeping in poll(2)
  /// (UCX's transports are always polled, as MPI does).
  int spin_us = 2000;
  /// Recursive doubling below this many bytes, ring from it (automatic).
  /// 0: by path, as measured (bench/RESULTS.md): 64 KiB when every pair
  /// is UCX's; with TCP lanes 256 KiB, and 512 KiB between 2 ranks (the
  /// same bytes either way, one step fewer for recursive doubling; the
  /// ring wins from 1 MiB by adding as the bytes land).
  std::size_t ring_from_bytes = 0;
  comm_net net = comm_net::automatic;
  /// The job token's hash (token_hash): a lane's peers must show it.
  std::uint64_t token_hash = 0;
  /// Sum through shared memory (shm_collective.hpp) rather than UCX's
  /// messages among the ranks of a host: all of them when every rank is
  /// on this host, hierarchically when hosts hold 2 or more ranks each.
  bool shm_sums = true;
};

/// A link's rendezvous address (ucx_link::address) that also carries a
/// communicator's worker address. Throws gradwire::error.
std::vector<std::uint8_t> with_collective(const std::vector<std::uint8_t>& link_address,
                                          const std::vector<std::uint8_t>& comm_address);
/// What a rank's rendezvous address says of its communicator: its address
/// (empty when it carries none), the rank's host identity (host name, boot
/// id, IPC namespace) and whether it is this process's. Throws
/// gradwire::error naming `rank`.
struct collective_peer {
  std::vector<std::uint8_t> address;
  bool same_host = false;
  std::string host; ///< the rank's host identity
};
collective_peer collective_of(const std::vector<std::uint8_t>& address, int rank);

class ucx_comm {
public:
  ucx_comm(int rank, int size, comm_options opts = {});
  ~ucx_comm();
  ucx_comm(const ucx_comm&) = delete;
  ucx_comm& operator=(const ucx_comm&) = delete;

  /// This communicator's address, for the rendezvous: its two UCX
  /// workers' (shared memory, network) and its TCP lanes'.
  std::vector<std::uint8_t> worker_address() const;
  /// Connects to every rank; `addresses[r]` is rank r's worker_address()
  /// (this rank's own entry is ignored), `host_of[r]` a number naming its
  /// host (equal numbers: one host, by host identity; every rank passes
  /// the same table). A rank on this host is reached through shared
  /// memory, others through the network, decided per pair. Each address
  /// is checked by UCX's parser in a child process first
  /// (ucx_setup::ucx_parse_check). Every rank calls it at once (lanes
  /// connect to each other).
  void connect(const std::vector<std::vector<std::uint8_t>>& addresses, const std::vector<int>& host_of);

  /// Sums `data[0..n)` across all ranks in place (every rank calls it
  /// with the same n and algorithm, in the same order).
  void allreduce(float* data, std::size_t n, allreduce_algo algo = allreduce_algo::automatic);
  /// What automatic picks for n floats on this communicator.
  allreduce_algo choose(std::size_t n) const;
  /// Waits until every rank has entered (an allreduce of one float).
  void barrier();
  /// Makes an allreduce in progress on another thread, and every later
  /// one, fail at once with `why` (the job lost a rank: a peer blocked in
  /// a sum must not wait out timeout_ms). Safe from any thread.
  void abort(const std::string& why);

  int rank() const;
  int size() const;
  /// Whether rank `peer` is reached through a TCP lane (after connect).
  bool by_lane(int peer) const;
  /// Whether allreduce can sum through shared memory (after connect):
  /// every rank is on this host and offered its segment.
  bool by_shared_memory() const;
  /// Whether allreduce can sum hierarchically (after connect): 2 or more
  /// hosts, some of 2 or more ranks, every rank offering a segment, and
  /// shared memory (not TCP) between the ranks of a host.
  bool hierarchical() const;
  std::string describe() const;

  struct impl;

private:
  std::unique_ptr<impl> p_;
};

} // namespace gradwire::transport
