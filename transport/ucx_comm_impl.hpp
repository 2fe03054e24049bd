#pragma once
/// @file ucx_comm_impl.hpp
/// ucx_comm's state and its point-to-point layer (the X of
/// comm_algorithms.hpp): UCX tag matching and TCP lanes, polled by the
/// calling thread. Private to ucx_comm*.cpp.

#include "transport/ucx_comm.hpp"

#include "kernels/error.hpp"
#include "transport/comm_algorithms.hpp"
#include "transport/comm_hosts.hpp"
#include "transport/shm_collective.hpp"
#include "transport/tcp_lanes.hpp"
#include "transport/ucx_setup.hpp"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <cstring>
#include <string>
#include <vector>

namespace gradwire::transport {

namespace comm_detail {
/// A tag: the collective's sequence number (32 bits), its step (16) and the sender (16).
inline ucp_tag_t tag_of(std::uint32_t seq, int step, int src) {
  return (static_cast<ucp_tag_t>(seq) << 32) | (static_cast<ucp_tag_t>(step & 0xffff) << 16) |
         static_cast<ucp_tag_t>(src & 0xffff);
}
constexpr ucp_tag_t full_mask = ~ucp_tag_t{0};
} // namespace comm_detail

struct ucx_comm::impl {
  /// connect()'s steps (ucx_comm.cpp): every peer's address checked and
  /// its path chosen (returns the UCX addresses to dial, by rank, and
  /// fills lane addresses and segment names); the UCX endpoints; the
  /// shared-memory or hierarchical sums the layout allows.
  struct peer_addresses {
    std::vector<std::vector<std::uint8_t>> ucx, lanes;
    std::vector<std::string> segments;
    bool all_segments = false; ///< every rank offered a shared-memory segment
  };
  peer_addresses read_addresses(const std::vector<std::vector<std::uint8_t>>& addresses,
                                const std::vector<bool>& same_host);
  void create_endpoints(const std::vector<std::vector<std::uint8_t>>& chosen, const std::vector<bool>& same_host);
  void start_sums(const comm_detail::host_layout& layout, const peer_addresses& peers);

  int rank, size;
  comm_options opts;
  /// Two UCX workers: one with only shared-memory transports for the
  /// ranks on this host, one for the others (network), chosen per peer
  /// by host identity. A peer on another host is never offered a
  /// shared-memory lane, one on this host never a TCP lane (whose failure
  /// path, when the peer dies, trips an assertion inside UCX 1.13).
  struct side {
    ucp_context_h context = nullptr;
    ucp_worker_h worker = nullptr;
    bool used = false;
  } sides[2]; ///< 0: this host, 1: other hosts
  std::vector<ucp_ep_h> eps;
  std::vector<ucp_worker_h> worker_of; ///< by peer
  std::unique_ptr<tcp_lanes> lanes;    ///< the communicator's own TCP path
  std::vector<bool> on_lane;           ///< by peer: through a lane, not UCX
  bool any_lane = false;              ///< some peer is (set by connect)
  /// Sums through shared memory among the ranks of this host: this
  /// rank's segment until connect finds it unused (a rank without one,
  /// TCP asked between the ranks of a host, one rank per host, this
  /// rank alone on its host), then null.
  std::unique_ptr<shm_allreduce> shm;
  /// abort(): set from any thread, looked at by wait()'s idle polls.
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  std::string abort_why; ///< guarded by abort_mu
  /// Hierarchical sums (several hosts, some holding 2 or more ranks).
  bool hier = false;
  int hosts = 1, owners = 0, largest = 0; ///< the layout: hosts, fewest and most ranks on one
  /// Hierarchical: the ranks of this one's local index on every host
  /// (empty: a local index past the smallest host's rank count).
  std::vector<int> across;
  int across_index = 0;
  std::vector<float> tmp; ///< a partner's contribution
  std::uint32_t seq = 0;
  bool broken = false;
  bool connected = false;

  /// One posted operation: its request (null: done at once) and what it expects.
  struct op {
    void* req = nullptr;
    int peer = 0;
    bool recv = false;
    std::size_t bytes = 0;
    ucp_tag_recv_info_t info{};
    bool done = false;
    bool lane = false;    ///< a TCP lane's message (below), not UCX's
    bool blocked = false; ///< lane: its socket was full or empty at the last try
    lane_op msg;
  };

  unsigned progress() {
    unsigned n = 0;
    for (auto& sd : sides)
      if (sd.used)
        n += ucp_worker_progress(sd.worker);
    return n;
  }

  void fail(const std::string& why) {
    broken = true;
    if (lanes)
      lanes->shut_down(); // the peers learn now, not after their timeout
    throw error("allreduce (rank " + std::to_string(rank) + "): " + why);
  }

  void post_send(op& o, int peer, const void* buf, std::size_t bytes, int step) {
    o = op{};
    o.peer = peer;
    if (on_lane[static_cast<std::size_t>(peer)]) {
      o.lane = true;
      o.msg = lane_send(lanes->fd(peer), peer, buf, bytes, seq, step);
      return;
    }
    ucp_request_param_t p{};
    auto st = ucp_tag_send_nbx(eps[static_cast<std::size_t>(peer)], buf, bytes, comm_detail::tag_of(seq, step, rank), &p);
    if (UCS_PTR_IS_ERR(st))
      fail("sending to rank " + std::to_string(peer) + ": " + ucs_status_string(UCS_PTR_STATUS(st)));
    o.req = st;
    o.done = st == nullptr;
  }

  /// With `into`, the message is added into it (`buf` is scratch): as
  /// it arrives on a lane, after it has arrived through UCX.
  void post_recv(op& o, int peer, void* buf, std::size_t bytes, int step, float* into = nullptr) {
    o = op{};
    o.peer = peer;
    o.recv = true;
    o.bytes = bytes;
    if (on_lane[static_cast<std::size_t>(peer)]) {
      o.lane = true;
      o.msg = lane_recv(lanes->fd(peer), peer, buf, bytes, seq, step, into);
      return;
    }
    o.msg.body = static_cast<std::uint8_t*>(buf);
    o.msg.accumulate = into;
    // Always a request (its info tells the length): UCX 1.13 left the
    // info of a receive that matched an unexpected message unwritten.
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    auto st = ucp_tag_recv_nbx(worker_of[static_cast<std::size_t>(peer)], buf, bytes, comm_detail::tag_of(seq, step, peer),
                               comm_detail::full_mask, &p);
    if (UCS_PTR_IS_ERR(st) || st == nullptr)
      fail("receiving from rank " + std::to_string(peer) + ": " +
           (st ? ucs_status_string(UCS_PTR_STATUS(st)) : "no request"));
    o.req = st;
  }

  void check_length(const op& o, int step) {
    if (o.info.length != o.bytes)
      fail("rank " + std::to_string(o.peer) + " sent " + std::to_string(o.info.length) + " bytes at step " +
           std::to_string(step) + ", " + std::to_string(o.bytes) + " expected (do all ranks call with the same size?)");
  }

  std::size_t ring_from(int ranks) const {
    if (opts.ring_from_bytes > 0)
      return opts.ring_from_bytes;
    if (!any_lane)
      return std::size_t{64} << 10;
    return ranks == 2 ? std::size_t{512} << 10 : std::size_t{256} << 10;
  }
  std::size_t ring_from() const { return ring_from(size); }

  /// Hierarchical: adds the other hosts' sums of data[0..n) (this rank's
  /// host sums) among the ranks of this local index, recursive doubling
  /// or the ring as for a flat communicator of that many ranks.
  void across_hosts(float* data, std::size_t n) {
    if (tmp.size() < n)
      tmp.resize(n);
    ++seq;
    comm_detail::group_view<impl> g{*this, across};
    const int h = static_cast<int>(across.size());
    if (n * sizeof(float) >= ring_from(h) && n >= across.size())
      comm_algorithms::ring(g, across_index, h, data, n, tmp.data());
    else
      comm_algorithms::recursive_doubling(g, across_index, h, data, n, tmp.data());
  }

  /// Moves a lane's message on; true if any byte moved.
  bool advance_lane(op& o) {
    const auto before = o.msg.head_done + o.msg.body_done;
    try {
      o.done = lane_advance(o.msg);
    } catch (const error& e) {
      fail(e.what());
    }
    // Only a receive whose message has not begun waits on poll(2); a
    // send, or a message under way, is tried again at once, which was
    // faster at every size than waiting on poll(2) for every stalled lane
    // (bench/RESULTS.md, "Figures behind the code").
    o.blocked = !o.done && o.recv && o.msg.head_done == 0;
    return o.msg.head_done + o.msg.body_done != before;
  }

  /// Asks the kernel which waiting lanes can move (waiting up to
  /// `timeout_ms`) and moves those. poll(2) reads a socket's state
  /// without its lock: spinning on recvmsg instead took the lock on every
  /// try and pushed the sender's packets onto the socket's backlog.
  bool poll_lanes(op* ops, int count, int timeout_ms) {
    pollfd fds[4];
    int which[4];
    nfds_t n = 0;
    for (int i = 0; i < count && n < 4; ++i)
      if (!ops[i].done && ops[i].lane && ops[i].blocked) {
        which[n] = i;
        fds[n++] = {ops[i].msg.fd, static_cast<short>(ops[i].recv ? POLLIN : POLLOUT), 0};
      }
    if (n == 0 || ::poll(fds, n, timeout_ms) <= 0)
      return false;
    bool moved = false;
    for (nfds_t k = 0; k < n; ++k)
      if (fds[k].revents != 0)
        moved = advance_lane(ops[which[k]]) || moved;
    return moved;
  }

  /// A UCX op, if it has completed: checked, freed, and a received
  /// contribution added where it is to be. False while it is in flight.
  bool finish_ucx_op(op& o, int step) {
    ucs_status_t st = o.recv ? ucp_tag_recv_request_test(o.req, &o.info) : ucp_request_check_status(o.req);
    if (st == UCS_INPROGRESS)
      return false;
    ucp_request_free(o.req);
    o.req = nullptr;
    o.done = true;
    if (st == UCS_ERR_MESSAGE_TRUNCATED)
      fail("rank " + std::to_string(o.peer) + " sent more than the " + std::to_string(o.bytes) +
           " bytes expected at step " + std::to_string(step));
    if (st != UCS_OK)
      fail(std::string(o.recv ? "receiving from" : "sending to") + " rank " + std::to_string(o.peer) + ": " +
           ucs_status_string(st));
    if (o.recv) {
      check_length(o, step);
      if (o.msg.accumulate)
        comm_algorithms::add(o.msg.accumulate, reinterpret_cast<const float*>(o.msg.body), o.bytes / sizeof(float));
    }
    return true;
  }

  /// Polls until every op is done; a peer silent for timeout_ms fails the
  /// communicator. Lanes are polled for spin_us after the last progress,
  /// then slept on (poll(2) with a timeout): in a VM a sleeping CPU takes
  /// hundreds of microseconds to wake, and two ranks that sleep in turn
  /// compound it (bench/RESULTS.md, "Figures behind the code").
  void wait(op* ops, int count, int step) {
    auto idle_since = std::chrono::steady_clock::now();
    unsigned idle = 0;
    bool sleepy = false;
    for (;;) {
      bool all = true, moved = false, ucx_pending = false;
      for (int k = 0; k < 2 * count; ++k) { // sends first: what this rank owes leaves before any check of what it got
        op& o = ops[k % count];
        if (o.done || o.recv != (k >= count))
          continue;
        if (o.lane) {
          if (!o.blocked)
            moved = advance_lane(o) || moved;
          all = all && o.done;
          continue;
        }
        ucx_pending = true;
        all = finish_ucx_op(o, step) && all;
      }
      if (all)
        return;
      // Sleep in poll(2) only when UCX has nothing in flight (its
      // transports are polled, never slept on, as MPI does).
      if (poll_lanes(ops, count, sleepy && !ucx_pending ? 10 : 0) || moved || progress() != 0) {
        idle = 0;
        sleepy = false;
        continue;
      }
      if (idle++ == 0)
        idle_since = std::chrono::steady_clock::now();
      if (opts.spin_yield && !sleepy)
        ::sched_yield();
      if ((idle & 63u) != 0 && !sleepy)
        continue;
      if (aborted.load(std::memory_order_relaxed)) {
        cancel(ops, count);
        std::lock_guard<std::mutex> lk(abort_mu);
        fail(abort_why + " (at step " + std::to_string(step) + " of collective " + std::to_string(seq) + ")");
      }
      const auto now = std::chrono::steady_clock::now();
      sleepy = now - idle_since > std::chrono::microseconds(opts.spin_us);
      if (now - idle_since > std::chrono::milliseconds(opts.timeout_ms)) {
        std::string who;
        for (int i = 0; i < count; ++i)
          if (!ops[i].done)
            who += (who.empty() ? "rank " : ", rank ") + std::to_string(ops[i].peer);
        cancel(ops, count);
        fail("no word from " + who + " for " + std::to_string(opts.timeout_ms) + " ms at step " +
             std::to_string(step) + " of collective " + std::to_string(seq));
      }
    }
  }

  /// A receive still posted must not write into the caller's buffer after
  /// the call has failed. (A lane's message is only moved by wait: left
  /// alone, it writes nothing.)
  void cancel(op* ops, int count) {
    for (int i = 0; i < count; ++i)
      if (!ops[i].done && ops[i].req)
        ucp_request_cancel(worker_of[static_cast<std::size_t>(ops[i].peer)], ops[i].req);
    for (int i = 0; i < count; ++i) {
      if (ops[i].done || !ops[i].req)
        continue;
      while (ucp_request_check_status(ops[i].req) == UCS_INPROGRESS)
        progress();
      ucp_request_free(ops[i].req);
      ops[i].req = nullptr;
      ops[i].done = true;
    }
  }

  /// Sends `send` to `to` and receives from `from` into `recv`, at once;
  /// with `into`, what arrives is added into it (recv is scratch).
  void sendrecv(int to, const float* send, std::size_t send_n, int from, float* recv, std::size_t recv_n, int step,
                float* into = nullptr) {
    op ops[2];
    post_recv(ops[0], from, recv, recv_n * sizeof(float), step, into);
    post_send(ops[1], to, send, send_n * sizeof(float), step);
    wait(ops, 2, step);
  }

  void send_only(int to, const float* send, std::size_t n, int step) {
    op o;
    post_send(o, to, send, n * sizeof(float), step);
    wait(&o, 1, step);
  }

  void recv_only(int from, float* recv, std::size_t n, int step, float* into = nullptr) {
    op o;
    post_recv(o, from, recv, n * sizeof(float), step, into);
    wait(&o, 1, step);
  }

};

} // namespace gradwire::transport
