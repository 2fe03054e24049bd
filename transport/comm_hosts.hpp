#pragma once
/// @file comm_hosts.hpp
/// How a communicator's ranks sit on hosts, as every rank works it out
/// alike from the same table (each rank's host, by host identity), and
/// the view of the communicator that the allreduce algorithms run on for
/// a group of its ranks.
///
/// The hierarchical allreduce (ucx_comm, shm_collective.hpp) cuts the
/// buffer in S segments, S the smallest host's rank count: local index
/// l < S on each host sums segment l with the ranks of index l on the
/// other hosts; a host's further ranks own no segment. Hosts are ordered
/// by their lowest rank, a host's ranks ascending.

#include <cstddef>
#include <vector>

namespace gradwire::transport::comm_detail {

struct host_layout {
  std::vector<int> local;  ///< the ranks on this rank's host, ascending (this one among them)
  std::vector<int> across; ///< the rank of this one's local index on every host (empty: index >= owners)
  int hosts = 0;           ///< how many hosts
  bool uniform = false;    ///< every host holds local.size() ranks
  int owners = 0;          ///< the fewest ranks a host holds: the segments S
  int largest = 0;         ///< the most ranks a host holds
  int local_index = 0;     ///< this rank's index in `local` (and the index it has on every host)
  int host_index = 0;      ///< this rank's host's index (its index in `across`)
};

/// host_of[r]: any number naming rank r's host (equal numbers, one host).
/// Throws gradwire::error when `rank` is out of range.
host_layout layout_of(const std::vector<int>& host_of, int rank);

/// The communicator X (see comm_algorithms.hpp) restricted to `members`:
/// rank i of the view is members[i] of the communicator.
template <typename X> struct group_view {
  X& x;
  const std::vector<int>& members;
  int of(int i) const { return members[static_cast<std::size_t>(i)]; }
  void sendrecv(int to, const float* send, std::size_t send_n, int from, float* recv, std::size_t recv_n, int step,
                float* into = nullptr) {
    x.sendrecv(of(to), send, send_n, of(from), recv, recv_n, step, into);
  }
  void send_only(int to, const float* send, std::size_t n, int step) { x.send_only(of(to), send, n, step); }
  void recv_only(int from, float* recv, std::size_t n, int step, float* into = nullptr) {
    x.recv_only(of(from), recv, n, step, into);
  }
};

} // namespace gradwire::transport::comm_detail
