#pragma once
/// @file tcp_lanes.hpp
/// The collective communicator's own TCP path: one connected socket per
/// peer, driven by the calling thread with non-blocking sendmsg/recvmsg,
/// as Open MPI's btl tcp and gloo do. UCX 1.13's TCP transport moves
/// 0.6-0.7 GB/s from 64 KiB to 1 MiB on a loopback that carries 2-3 GB/s
/// (bench/RESULTS.md), and pays an epoll_wait per progress call; these
/// lanes read straight into the caller's buffer and add as bytes arrive.
///
/// Between two ranks the messages of a collective are strictly ordered,
/// so a lane needs no matching: each message is a 16-byte header (the
/// collective's sequence number, its step, the length) and the payload.
/// Every header is checked against what the receiver expects; a peer
/// that sends another step, another length, or closes, is named in a
/// gradwire::error and the receive never writes past its buffer.
///
/// Connection: rank r connects to each lower-ranked peer (trying the
/// addresses it advertised in order) and accepts the higher ones. Both
/// sides prove who they are with a hello carrying the job token's hash
/// and the other side's nonce, so a stray connection, or an address that
/// reaches some other host's process, is refused and never taken for a
/// peer. Addresses: the host's IPv4 interfaces that are up, loopback last;
/// GRADWIRE_SOCKET_IFNAME=eth0,ib0 (as NCCL_SOCKET_IFNAME) restricts them.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::transport {

/// What precedes every payload on a lane.
struct lane_header {
  std::uint32_t seq = 0;   ///< the collective's sequence number
  std::uint16_t step = 0;  ///< its step
  std::uint16_t magic = 0; ///< lane_magic
  std::uint64_t bytes = 0; ///< payload length
};
static_assert(sizeof(lane_header) == 16);

/// One message in flight on a lane (a send or a receive).
struct lane_op {
  int fd = -1;
  int peer = 0;
  bool recv = false;
  lane_header head{};            ///< to send, or as it arrives
  lane_header want{};            ///< receive: the header expected
  std::size_t head_done = 0;     ///< header bytes moved
  std::uint8_t* body = nullptr;  ///< payload (a receive writes at most `bytes`)
  std::size_t bytes = 0;         ///< payload length (expected, for a receive)
  std::size_t body_done = 0;     ///< payload bytes moved
  float* accumulate = nullptr;   ///< receive: add each float that arrives into this
  std::size_t added = 0;         ///< floats added so far
};

/// Prepares a send of `bytes` from `buf` to `peer` as step `step` of collective `seq`.
lane_op lane_send(int fd, int peer, const void* buf, std::size_t bytes, std::uint32_t seq, int step);
/// Prepares a receive of exactly `bytes` into `buf` (step `step` of
/// collective `seq`); with `accumulate`, each float that lands in `buf`
/// is also added into accumulate[i] (buf is then scratch).
lane_op lane_recv(int fd, int peer, void* buf, std::size_t bytes, std::uint32_t seq, int step,
                  float* accumulate = nullptr);
/// Moves `o` on as far as the socket allows without blocking. Returns
/// true when it is complete, false when the socket has no room or no
/// data yet. Throws gradwire::error naming the peer when it closed, reset,
/// or sent a header other than the one expected.
bool lane_advance(lane_op& o);

class tcp_lanes {
public:
  /// Opens a listening socket on an ephemeral port of every interface.
  tcp_lanes(int rank, int size, std::uint64_t token_hash, int timeout_ms);
  ~tcp_lanes();
  tcp_lanes(const tcp_lanes&) = delete;
  tcp_lanes& operator=(const tcp_lanes&) = delete;

  /// This rank's lane address: nonce, port, its IPv4 addresses.
  std::vector<std::uint8_t> address() const;
  /// Connects to every rank r with want[r] (want must agree on both sides
  /// of each pair); addresses[r] is rank r's address(). Throws
  /// gradwire::error naming the rank that cannot be reached, or the ranks
  /// that never connected within the timeout.
  void connect(const std::vector<std::vector<std::uint8_t>>& addresses, const std::vector<bool>& want);
  /// A peer's lane address, as address() wrote it.
  struct peer_address {
    std::uint64_t nonce = 0;
    std::uint16_t port = 0;
    std::vector<std::uint32_t> ipv4; ///< network byte order
  };
  /// Checks and reads rank `rank`'s address(); throws gradwire::error naming it.
  static peer_address parse(const std::vector<std::uint8_t>& blob, int rank);

  /// The connected socket to `peer` (-1: none).
  int fd(int peer) const { return fds_[static_cast<std::size_t>(peer)]; }
  /// Shuts every lane down (a failed communicator): each peer's next
  /// read sees the connection closed at once instead of waiting for its
  /// timeout.
  void shut_down();

private:
  int dial(int peer, const peer_address& a, std::string& why) const;
  void accept_from_higher(const std::vector<peer_address>& peers, const std::vector<bool>& want);

  int rank_, size_;
  std::uint64_t token_, nonce_;
  int timeout_ms_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::vector<std::uint32_t> mine_; ///< advertised addresses, network byte order
  std::vector<int> fds_;
};

} // namespace gradwire::transport
