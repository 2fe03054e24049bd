#include "transport/ucx_comm.hpp"

#include "kernels/error.hpp"
#include "transport/comm_address.hpp"
#include "transport/comm_algorithms.hpp"
#include "transport/shm_collective.hpp"
#include "transport/tcp_lanes.hpp"
#include "transport/ucx_setup.hpp"

#include <poll.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

namespace gradwire::transport {

namespace {
/// A tag: the collective's sequence number (32 bits), its step (16) and the sender (16).
ucp_tag_t tag_of(std::uint32_t seq, int step, int src) {
  return (static_cast<ucp_tag_t>(seq) << 32) | (static_cast<ucp_tag_t>(step & 0xffff) << 16) |
         static_cast<ucp_tag_t>(src & 0xffff);
}
constexpr ucp_tag_t full_mask = ~ucp_tag_t{0};
} // namespace

struct ucx_comm::impl {
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
  /// Sums through shared memory: this rank's segment until connect
  /// finds some rank elsewhere (or without one), then null.
  std::unique_ptr<shm_allreduce> shm;
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
    auto st = ucp_tag_send_nbx(eps[static_cast<std::size_t>(peer)], buf, bytes, tag_of(seq, step, rank), &p);
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
    auto st = ucp_tag_recv_nbx(worker_of[static_cast<std::size_t>(peer)], buf, bytes, tag_of(seq, step, peer),
                               full_mask, &p);
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

  std::size_t ring_from() const {
    if (opts.ring_from_bytes > 0)
      return opts.ring_from_bytes;
    if (!any_lane)
      return std::size_t{64} << 10;
    return size == 2 ? std::size_t{512} << 10 : std::size_t{256} << 10;
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
    // send, or a message under way, is tried again at once. Measured
    // (4 interleaved rounds, 2 ranks over TCP): 1 KiB 12.9 us against
    // 13.6 when every stalled lane waited on poll(2); 256 KiB 171 us
    // against 194.
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

  /// Polls until every op is done; a peer silent for timeout_ms fails the
  /// communicator. Lanes are polled for spin_us after the last progress,
  /// then slept on (poll(2) with a timeout): in a VM a sleeping CPU takes
  /// hundreds of microseconds to wake, and two ranks that sleep in turn
  /// compound it (1 KiB over TCP swung between 13 and 520 us when ranks
  /// slept after 256 idle polls).
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
        ucs_status_t st = o.recv ? ucp_tag_recv_request_test(o.req, &o.info) : ucp_request_check_status(o.req);
        if (st == UCS_INPROGRESS) {
          all = false;
          continue;
        }
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

ucx_comm::ucx_comm(int rank, int size, comm_options opts) : p_(std::make_unique<impl>()) {
  check(size >= 1 && size <= 0xffff && rank >= 0 && rank < size,
        "collective communicator: rank " + std::to_string(rank) + " of " + std::to_string(size));
  p_->rank = rank;
  p_->size = size;
  p_->opts = std::move(opts);
  // Eager messages up to 256 KiB across hosts: below it, UCX's
  // rendezvous handshake costs more than the copy it saves (2 ranks over
  // TCP: 16 KiB in 130-208 us with UCX's own threshold, 46-63 us with
  // this one). On this host, without CMA, UCX's rendezvous falls back to
  // a slow pipeline: every size eager (1 MiB 268-396 us, against
  // 930-1540 us).
  const std::string tls = comm_detail::without_cma(p_->opts.tls);
  ucx_options here, away;
  here.tls = p_->opts.tls.empty() ? "posix,sysv,self" : tls;
  here.ucx_config = {{"RNDV_THRESH", "inf"}};
  away.tls = tls;
  away.ucx_config = {{"RNDV_THRESH", "256k"}};
  ucx_setup::open(here, p_->sides[0].context, p_->sides[0].worker, UCP_FEATURE_TAG);
  ucx_setup::open(away, p_->sides[1].context, p_->sides[1].worker, UCP_FEATURE_TAG);
  if (p_->opts.net != comm_net::ucx)
    p_->lanes = std::make_unique<tcp_lanes>(rank, size, p_->opts.token_hash, p_->opts.timeout_ms);
  if (p_->opts.shm_sums && size > 1 && size <= shm_allreduce::max_ranks) {
    try {
      p_->shm = std::make_unique<shm_allreduce>(rank, size, p_->opts.timeout_ms, p_->opts.spin_yield);
    } catch (const std::exception& e) { // no /dev/shm here: the sums go over UCX, as across hosts
      std::fprintf(stderr, "gradwire: rank %d: %s; the collective sums through UCX\n", rank, e.what());
    }
  }
}

ucx_comm::~ucx_comm() {
  for (std::size_t r = 0; r < p_->eps.size(); ++r) {
    if (!p_->eps[r])
      continue;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    auto st = ucp_ep_close_nbx(p_->eps[r], &prm);
    if (UCS_PTR_IS_PTR(st)) {
      while (ucp_request_check_status(st) == UCS_INPROGRESS)
        ucp_worker_progress(p_->worker_of[r]);
      ucp_request_free(st);
    }
  }
  for (auto& sd : p_->sides) {
    if (sd.worker)
      ucp_worker_destroy(sd.worker);
    if (sd.context)
      ucp_cleanup(sd.context);
  }
}

namespace {
std::vector<std::uint8_t> worker_blob(ucp_worker_h w) {
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  ucx_setup::check_status(ucp_worker_get_address(w, &addr, &len), "getting the collective worker address");
  std::vector<std::uint8_t> out(reinterpret_cast<std::uint8_t*>(addr), reinterpret_cast<std::uint8_t*>(addr) + len);
  ucp_worker_release_address(w, addr);
  return out;
}
} // namespace

std::vector<std::uint8_t> ucx_comm::worker_address() const {
  comm_detail::comm_address a;
  a.here = worker_blob(p_->sides[0].worker);
  a.away = worker_blob(p_->sides[1].worker);
  if (p_->lanes)
    a.lanes = p_->lanes->address();
  if (p_->shm)
    a.segment = p_->shm->name();
  return comm_detail::pack(a);
}

void ucx_comm::connect(const std::vector<std::vector<std::uint8_t>>& addresses, const std::vector<bool>& same_host) {
  check(static_cast<int>(addresses.size()) == p_->size && same_host.size() == addresses.size(),
        "collective communicator: one address per rank expected");
  const auto n = addresses.size();
  std::vector<std::vector<std::uint8_t>> chosen(n), lane_addresses(n);
  std::vector<std::string> segments(n);
  p_->on_lane.assign(n, false);
  bool all_here = true; // every peer on this host, through UCX's shared memory, with a segment
  for (int r = 0; r < p_->size; ++r) { // every address checked before any endpoint exists
    if (r == p_->rank)
      continue;
    const auto i = static_cast<std::size_t>(r);
    auto a = comm_detail::unpack(addresses[i], r);
    segments[i] = std::move(a.segment);
    all_here = all_here && same_host[i] && !segments[i].empty();
    if (p_->lanes && comm_detail::by_lane(p_->opts.net, p_->opts.tls, same_host[i])) {
      check(!a.lanes.empty(), "collective communicator: rank " + std::to_string(r) +
                                  " opened no TCP lanes (is --net the same on every rank?)");
      p_->on_lane[i] = true;
      p_->any_lane = true;
      all_here = false;
      lane_addresses[i] = std::move(a.lanes);
      continue;
    }
    chosen[i] = same_host[i] ? std::move(a.here) : std::move(a.away);
    const auto why = ucx_setup::ucx_parse_check(chosen[i]);
    check(why.empty(), "collective communicator: rank " + std::to_string(r) + "'s address: " + why);
  }
  p_->eps.assign(n, nullptr);
  p_->worker_of.assign(n, nullptr);
  for (int r = 0; r < p_->size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (r == p_->rank || p_->on_lane[i])
      continue;
    auto& sd = p_->sides[same_host[i] ? 0 : 1];
    sd.used = true;
    p_->worker_of[i] = sd.worker;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(chosen[i].data());
    ucx_setup::check_status(ucp_ep_create(sd.worker, &ep, &p_->eps[i]),
                            ("collective communicator: connecting to rank " + std::to_string(r)).c_str());
  }
  if (p_->lanes)
    p_->lanes->connect(lane_addresses, p_->on_lane);
  // Every rank sees the same ranks' names and hosts, so every rank
  // decides the same. A first sum tells each rank that every peer has
  // mapped its segment: its name can go from /dev/shm.
  if (p_->shm && all_here) {
    p_->shm->connect(segments);
    float one = 1;
    p_->shm->allreduce(&one, 1);
    p_->shm->unlink();
  } else {
    p_->shm.reset();
  }
  p_->connected = true;
  ucx_setup::restrict_sysv_segments();
}

bool ucx_comm::by_shared_memory() const { return p_->shm != nullptr && p_->connected; }

bool ucx_comm::by_lane(int peer) const {
  return peer >= 0 && static_cast<std::size_t>(peer) < p_->on_lane.size() && p_->on_lane[static_cast<std::size_t>(peer)];
}

allreduce_algo ucx_comm::choose(std::size_t n) const {
  if (by_shared_memory())
    return allreduce_algo::shared_memory;
  return n * sizeof(float) < p_->ring_from() ? allreduce_algo::recursive_doubling : allreduce_algo::ring;
}

void ucx_comm::allreduce(float* data, std::size_t n, allreduce_algo algo) {
  if (p_->broken || (p_->size > 1 && !p_->connected)) // (no message built on the hot path)
    throw error("allreduce (rank " + std::to_string(p_->rank) + "): the communicator " +
                (p_->broken ? "failed earlier" : "is not connected"));
  if (p_->size == 1 || n == 0)
    return;
  if (algo == allreduce_algo::automatic)
    algo = choose(n);
  if (algo == allreduce_algo::shared_memory) {
    if (!by_shared_memory())
      throw error("allreduce (rank " + std::to_string(p_->rank) +
                  "): sums through shared memory need every rank on this host");
    try {
      p_->shm->allreduce(data, n);
    } catch (...) {
      p_->broken = true; // as after any failure: unusable from here
      throw;
    }
    return;
  }
  if (p_->tmp.size() < n)
    p_->tmp.resize(n);
  ++p_->seq;
  if (algo == allreduce_algo::ring && n >= static_cast<std::size_t>(p_->size))
    comm_algorithms::ring(*p_, p_->rank, p_->size, data, n, p_->tmp.data());
  else if (algo == allreduce_algo::halving_doubling && n >= static_cast<std::size_t>(p_->size))
    comm_algorithms::halving_doubling(*p_, p_->rank, p_->size, data, n, p_->tmp.data());
  else
    comm_algorithms::recursive_doubling(*p_, p_->rank, p_->size, data, n, p_->tmp.data());
}

void ucx_comm::barrier() {
  float one = 1;
  allreduce(&one, 1, allreduce_algo::recursive_doubling);
}

int ucx_comm::rank() const { return p_->rank; }
int ucx_comm::size() const { return p_->size; }

std::string ucx_comm::describe() const {
  const auto lanes = std::count(p_->on_lane.begin(), p_->on_lane.end(), true);
  const std::string driver = "the calling thread drives every transfer (" + std::string(to_string(p_->opts.net)) +
                             " net" + (p_->opts.tls.empty() ? "" : ", tls " + p_->opts.tls) + "), ";
  if (by_shared_memory())
    return driver + "every rank on this host: sums through shared memory at every size (each rank adds its "
                    "segment from its peers' shared segments)";
  return driver + "recursive doubling below " +
         std::to_string(p_->ring_from() >> 10) + " KiB, ring from there; " +
         "UCX shared memory to ranks on this host (every size eager), " +
         (lanes == 0 ? std::string("UCX tag matching to other hosts (rendezvous from 256 KiB)")
                     : "TCP lanes to " + std::to_string(lanes) + " of " + std::to_string(p_->size - 1) +
                           " peers (gradwire's own sockets)");
}

} // namespace gradwire::transport
