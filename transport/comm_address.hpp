#pragma once
/// @file comm_address.hpp
/// The collective communicator's address (what rides in a rank's
/// rendezvous entry) and the rules that pick each pair's path. Internal
/// to the communicator (ucx_comm.cpp, tcp_lanes.cpp).

#include "transport/ucx_comm.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::transport::comm_detail {

/// The parts of a communicator's address: its UCX workers' addresses
/// (shared memory, network), its TCP lanes' (empty: none) and its
/// shared-memory segment's name (shm_collective.hpp; empty: none).
struct comm_address {
  std::vector<std::uint8_t> here, away, lanes;
  std::string segment;
};
std::vector<std::uint8_t> pack(const comm_address& a);
/// Throws gradwire::error naming `rank` when `in` is truncated, foreign
/// or has trailing bytes.
comm_address unpack(const std::vector<std::uint8_t>& in, int rank);

/// The items of a comma-separated list ("posix,tcp", "eth0,ib0"), empty ones dropped.
std::vector<std::string> split_list(const std::string& text);

/// `tls` less UCX's CMA (see ucx_comm.hpp).
std::string without_cma(const std::string& tls);

/// Whether a pair goes over a TCP lane rather than UCX: `same_host`
/// pairs only when asked (net sockets, or a tls of TCP alone); others
/// unless net is ucx, the tls names a transport that is not TCP or
/// shared memory, or (tls left to UCX) this host has an RDMA device.
bool by_lane(comm_net net, const std::string& tls, bool same_host);

} // namespace gradwire::transport::comm_detail
