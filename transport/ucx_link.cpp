#include "transport/ucx_link.hpp"

#include "kernels/error.hpp"

#include <ucp/api/ucp.h>

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

namespace gradwire::transport {

namespace {

constexpr unsigned am_id = 7;
constexpr std::uint64_t inline_marker = 0x4757494e4c494e45ull; // "GWINLINE": header at the front of the data
constexpr std::size_t max_am_header = 4096;
// A ring chunk by reference: [ref_marker, sender, id, owner rank, offset, bytes, frame header...].
constexpr std::uint64_t ref_marker = 0x475753484d524546ull;     // "GWSHMREF"
// The receiver let go of it: [release_marker, receiver, id].
constexpr std::uint64_t release_marker = 0x475753484d52454cull; // "GWSHMREL"
// After connecting, to each peer on the node: [announce_marker, sender, bytes, name length, name...].
constexpr std::uint64_t announce_marker = 0x475753484d414e4eull; // "GWSHMANN"
// The answer, once mapped: [mapped_marker, sender].
constexpr std::uint64_t mapped_marker = 0x475753484d4d4150ull;  // "GWSHMMAP"
constexpr std::uint64_t address_magic = 0x4757414444523031ull;  // "GWADDR01"
constexpr std::size_t ref_words = 6;

/// What a rank's rendezvous address carries: its UCX worker address and
/// its host (peers on the same host share memory: shm_refs).
struct address_blob {
  std::vector<std::uint8_t> ucx;
  std::string host;
};

void put_field(std::vector<std::uint8_t>& out, const void* p, std::uint32_t n) {
  const auto* len = reinterpret_cast<const std::uint8_t*>(&n);
  out.insert(out.end(), len, len + 4);
  const auto* b = static_cast<const std::uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

std::vector<std::uint8_t> pack_address(const address_blob& a) {
  std::vector<std::uint8_t> out(8);
  std::memcpy(out.data(), &address_magic, 8);
  put_field(out, a.ucx.data(), static_cast<std::uint32_t>(a.ucx.size()));
  put_field(out, a.host.data(), static_cast<std::uint32_t>(a.host.size()));
  return out;
}

address_blob unpack_address(const std::vector<std::uint8_t>& in, int rank) {
  std::size_t at = 0;
  auto take = [&](void* dst, std::size_t n) {
    check(at + n <= in.size(), "rendezvous: rank " + std::to_string(rank) + "'s address is truncated");
    std::memcpy(dst, in.data() + at, n);
    at += n;
  };
  std::uint64_t magic = 0;
  take(&magic, 8);
  check(magic == address_magic, "rendezvous: rank " + std::to_string(rank) + "'s address is not a gradwire address");
  address_blob a;
  auto take_field = [&](auto& dst) {
    std::uint32_t n = 0;
    take(&n, 4);
    check(n <= in.size() - at, "rendezvous: rank " + std::to_string(rank) + "'s address is truncated");
    dst.resize(n);
    take(dst.data(), n);
  };
  take_field(a.ucx);
  take_field(a.host);
  return a;
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

void ucs_check(ucs_status_t st, const char* what) {
  if (st != UCS_OK)
    throw error(std::string("UCX: ") + what + ": " + ucs_status_string(st));
}

/// A send in flight: what must stay alive until UCX is done with it.
struct pending_send {
  ucx_link::impl* link;
  std::vector<std::uint64_t> header;
  kernels::tensor data;
  int peer;
};

/// A rendezvous frame whose data is still to be fetched.
struct pending_recv {
  ucx_link::impl* link;
  std::vector<std::uint64_t> header;
  std::size_t header_bytes;
  void* desc;
  std::size_t length;
  kernels::tensor buffer;
};

struct peer_slot {
  ucx_link::impl* link;
  int rank;
};

/// The link whose UCX worker this thread is driving right now (holding its
/// lock): a send from here (an actor run by a delivery) is queued.
thread_local const ucx_link::impl* driving = nullptr;

} // namespace

struct ucx_link::impl {
  int rank, size;
  ucx_options opts;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> eps;
  std::vector<std::unique_ptr<peer_slot>> slots;
  std::vector<std::atomic<bool>> dead;
  int efd = -1;
  std::shared_ptr<buffer_pool> pool = std::make_shared<buffer_pool>();
  handlers h;
  std::thread progress;
  std::atomic<bool> stop{false};
  std::atomic<long> in_flight{0};           ///< queued or posted, not complete
  std::mutex queue_mu;
  std::vector<std::unique_ptr<pending_send>> queue; ///< sends from other threads, posted by the progress thread
  std::atomic<int> queued{0};
  /// UCX runs in single-thread mode; this lock makes it one thread at a
  /// time: the progress thread (released while it sleeps) and senders that
  /// post directly (saving the progress thread's wake-up per frame).
  std::mutex ucx_mu;
  std::vector<pending_recv*> rndv; ///< under ucx_mu
  /// Some thread polled within the last ~100 us (ucx_link::poll): a direct
  /// send then need not wake the progress thread.
  std::atomic<std::int64_t> last_poll_ns{0};

  // Shared-memory references (opts.shm_refs).
  std::shared_ptr<shm_arena> arena;           ///< this process's
  std::vector<std::shared_ptr<shm_mapping>> maps; ///< by rank: peers on this node
  std::vector<bool> local;                    ///< by rank: on this node (from the rendezvous)
  std::vector<std::atomic<bool>> can_ref;     ///< by rank: it has mapped our arena
  mutable std::mutex refs_mu;
  std::vector<std::unordered_map<std::uint64_t, kernels::tensor>> held; ///< by peer: lent, not released
  std::atomic<std::uint64_t> next_ref{1};
  std::atomic<int> peers_mapped{0}; ///< node-local peers that said they mapped our arena
  /// References into a third rank's arena that arrived before its
  /// announcement (under refs_mu; replayed once mapped).
  std::vector<std::vector<std::pair<std::vector<std::uint64_t>, std::size_t>>> deferred;
  /// Lets a received view's release reach the link while it exists.
  struct alive_token {
    std::mutex mu;
    impl* link = nullptr;
  };
  std::shared_ptr<alive_token> alive = std::make_shared<alive_token>();

  impl(int r, int n, ucx_options o)
    : rank(r), size(n), opts(std::move(o)), dead(static_cast<std::size_t>(n)), can_ref(static_cast<std::size_t>(n)) {
    alive->link = this;
  }

  /// Queues a frame for the progress thread (any thread).
  void enqueue(int peer, std::vector<std::uint64_t> header, bool wake = true) {
    if (stop.load() || dead[static_cast<std::size_t>(peer)].load())
      return;
    in_flight.fetch_add(1);
    auto ps = std::make_unique<pending_send>(pending_send{this, std::move(header), {}, peer});
    {
      std::lock_guard<std::mutex> lk(queue_mu);
      queue.push_back(std::move(ps));
      queued.fetch_add(1, std::memory_order_release);
    }
    if (wake)
      ucp_worker_signal(worker);
  }

  /// A peer on this node announced its arena: map it, say so.
  void on_announce(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes) {
    const auto src = hdr[1], bytes = hdr[2], len = hdr[3];
    if (!arena)
      return; // shm_refs off here (or no shared memory): that peer goes on copying
    if (src >= static_cast<std::uint64_t>(size) || !local[src] || len > 200 || 32 + len > header_bytes) {
      if (h.rejected)
        h.rejected("frame refused: malformed or unexpected shared-memory announcement");
      return;
    }
    std::string name(reinterpret_cast<const char*>(hdr.data() + 4), len);
    try {
      auto m = std::make_shared<shm_mapping>(name, bytes);
      std::vector<std::pair<std::vector<std::uint64_t>, std::size_t>> waiting;
      {
        std::lock_guard<std::mutex> lk(refs_mu);
        maps[src] = std::move(m);
        waiting.swap(deferred[src]);
      }
      enqueue(static_cast<int>(src), {mapped_marker, static_cast<std::uint64_t>(rank)});
      for (const auto& [hd, hb] : waiting) // passed on by a third rank before this arrived
        on_ref(hd, hb);
    } catch (const std::exception& e) { // that peer keeps copying its frames to us
      std::fprintf(stderr, "gradwire: rank %d: %s (rank %d's frames will be copied)\n", rank, e.what(),
                   static_cast<int>(src));
      std::lock_guard<std::mutex> lk(refs_mu);
      if (!deferred[src].empty() && h.rejected)
        h.rejected("frame refused: " + std::to_string(deferred[src].size()) + " reference(s) into rank " +
                   std::to_string(src) + "'s memory, which could not be mapped");
      deferred[src].clear();
    }
  }

  /// After connect(): this process's arena, when shm_refs and a peer shares the node.
  void open_arena();

  int local_peers() const {
    int n = 0;
    for (bool l : local)
      n += l ? 1 : 0;
    return n;
  }

  /// Where `t` lies in shared memory `peer` maps: our arena, its own (a
  /// chunk come back round the ring) or a third rank's on this node (a
  /// chunk passed on; the receiver maps every arena announced to it, and
  /// waits for an announcement still on its way); its owner and offset.
  bool locate(const kernels::tensor& t, int peer, int& owner, std::int64_t& offset) {
    offset = arena->offset_of(t.data(), t.bytes());
    if (offset >= 0) {
      owner = rank;
      return true;
    }
    std::lock_guard<std::mutex> lk(refs_mu);
    for (int q = 0; q < size; ++q) { // our own memory, the receiver's, or a third rank's on this node
      if (q != peer && !local[static_cast<std::size_t>(q)])
        continue;
      const auto& m = maps[static_cast<std::size_t>(q)];
      if (!m)
        continue;
      const char* c = reinterpret_cast<const char*>(t.data());
      if (c >= m->base() && c + t.bytes() <= m->base() + m->size()) {
        owner = q;
        offset = c - m->base();
        return true;
      }
    }
    return false;
  }

  /// A ring chunk by reference: a read-only view where it lies, released
  /// to its sender when the last reference here goes.
  void on_ref(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes) {
    auto refuse = [&](const std::string& why) {
      if (h.rejected)
        h.rejected("frame refused: shared-memory reference " + why);
    };
    if (header_bytes < ref_words * 8 || !arena)
      return refuse(arena ? "too short" : "but this process has no shared memory (shm_refs off)");
    const auto src = static_cast<std::int64_t>(hdr[1]), owner = static_cast<std::int64_t>(hdr[3]);
    const std::uint64_t id = hdr[2], off = hdr[4], bytes = hdr[5];
    if (src < 0 || src >= size || src == rank || owner < 0 || owner >= size)
      return refuse("from rank " + std::to_string(src) + " to rank " + std::to_string(owner) + "'s memory: no such rank");
    const char* base = nullptr;
    std::size_t limit = 0;
    std::shared_ptr<void> keep; // the memory stays mapped while the view lives
    if (owner == rank) { // our own memory, come back round the ring
      base = arena->base();
      limit = arena->size();
      keep = arena;
    } else if (auto m = mapping(static_cast<int>(owner))) {
      base = m->base();
      limit = m->size();
      keep = m;
    } else if (local[static_cast<std::size_t>(owner)] && !dead[static_cast<std::size_t>(owner)].load()) {
      // Passed on from a third rank on this node whose announcement is still on its way.
      std::lock_guard<std::mutex> lk(refs_mu);
      if (!maps[static_cast<std::size_t>(owner)]) {
        deferred[static_cast<std::size_t>(owner)].emplace_back(hdr, header_bytes);
        return;
      }
      base = maps[static_cast<std::size_t>(owner)]->base();
      limit = maps[static_cast<std::size_t>(owner)]->size();
      keep = maps[static_cast<std::size_t>(owner)];
    } else {
      return refuse("into rank " + std::to_string(owner) + "'s memory, which this process has not mapped");
    }
    if (bytes == 0 || bytes % sizeof(float) || bytes > opts.max_data_bytes || off > limit || bytes > limit - off)
      return refuse("of " + std::to_string(bytes) + " bytes at " + std::to_string(off) + " in rank " +
                    std::to_string(owner) + "'s memory (" + std::to_string(limit) + " bytes)");
    const char* p = base + off;
    auto token = alive;
    auto st = std::make_shared<kernels::storage>(const_cast<char*>(p), bytes, kernels::device::cpu(),
                                                 [token, keep, src, id, me = rank](void*) {
                                                   std::lock_guard<std::mutex> lk(token->mu);
                                                   if (token->link)
                                                     // No wake-up of the progress thread for it: it goes
                                                     // out with the next round of traffic (or the loop's
                                                     // 1 ms poll). 4 ranks, 1 MiB: 2.61 -> 2.76 GB/s.
                                                     token->link->enqueue(static_cast<int>(src),
                                                                          {release_marker, static_cast<std::uint64_t>(me), id},
                                                                          false);
                                                 });
    kernels::tensor view(st, 0, {static_cast<std::int64_t>(bytes / sizeof(float))}, kernels::dtype::f32);
    std::vector<std::uint64_t> inner(hdr.begin() + ref_words, hdr.end());
    deliver(std::move(inner), header_bytes - ref_words * 8, std::move(view));
  }

  std::shared_ptr<shm_mapping> mapping(int r) {
    std::lock_guard<std::mutex> lk(refs_mu);
    return maps[static_cast<std::size_t>(r)];
  }

  void on_release(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes) {
    if (header_bytes != 3 * 8 || hdr[1] >= static_cast<std::uint64_t>(size)) {
      if (h.rejected)
        h.rejected("frame refused: malformed shared-memory release");
      return;
    }
    std::lock_guard<std::mutex> lk(refs_mu);
    held[hdr[1]].erase(hdr[2]);
  }

  void report_peer(int peer, const std::string& what) {
    if (peer < 0 || peer >= size || dead[static_cast<std::size_t>(peer)].exchange(true))
      return;
    if (!held.empty()) {
      std::lock_guard<std::mutex> lk(refs_mu);
      held[static_cast<std::size_t>(peer)].clear(); // it will not release them
      deferred[static_cast<std::size_t>(peer)].clear();
    }
    if (h.peer_error)
      h.peer_error(peer, what);
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t st) {
    auto* s = static_cast<peer_slot*>(arg);
    s->link->report_peer(s->rank, std::string("connection to rank ") + std::to_string(s->rank) +
                                      " failed: " + ucs_status_string(st));
  }

  static void on_send_done(void* request, ucs_status_t st, void* user) {
    std::unique_ptr<pending_send> ps(static_cast<pending_send*>(user));
    if (st != UCS_OK)
      ps->link->report_peer(ps->peer, std::string("send to rank ") + std::to_string(ps->peer) +
                                          " failed: " + ucs_status_string(st));
    ps->link->in_flight.fetch_sub(1);
    ucp_request_free(request);
  }

  /// A frame for the handler, held until the UCX callback that brought it
  /// has returned (under ucx_mu, in arrival order).
  struct ready_frame {
    std::vector<std::uint64_t> header;
    std::size_t header_bytes;
    kernels::tensor data;
  };
  std::deque<ready_frame> ready;

  /// Frames are handed to the handler after ucp_worker_progress returns,
  /// one at a time, each followed by posting what its handler sent. Handled
  /// inside the callback, a frame's sends waited in the queue for the rest
  /// of that progress call, which may handle the next frame first: a ring
  /// peer's own chunk of the next allreduce then left only after it had
  /// added its neighbour's (2 processes, 256 KiB: the two adds ran one
  /// after the other instead of at once).
  void deliver(std::vector<std::uint64_t> header, std::size_t header_bytes, kernels::tensor data) {
    ready.push_back({std::move(header), header_bytes, std::move(data)});
  }

  /// Hands the frames that arrived to the handler (under ucx_mu); whether any.
  bool run_ready() {
    if (ready.empty())
      return false;
    while (!ready.empty()) {
      auto f = std::move(ready.front());
      ready.pop_front();
      deliver_now(f.header, f.header_bytes, std::move(f.data));
      drain_queue();
    }
    return true;
  }

  void deliver_now(const std::vector<std::uint64_t>& header, std::size_t header_bytes, kernels::tensor data) {
    if (!h.receive)
      return;
    if (header_bytes == 2 * sizeof(std::uint64_t) && header[0] == inline_marker) { // header inside the data
      const std::size_t hb = header[1], have = data.defined() ? data.bytes() : 0;
      if (hb % sizeof(std::uint64_t) || hb > have || hb > opts.max_header_bytes) {
        if (h.rejected)
          h.rejected("frame refused: inline header of " + std::to_string(hb) + " bytes in " + std::to_string(have) +
                     " bytes of data");
        return;
      }
      std::vector<std::uint64_t> inner(hb / sizeof(std::uint64_t));
      std::memcpy(inner.data(), data.data(), hb);
      const auto rest = static_cast<std::int64_t>((have - hb) / sizeof(float));
      h.receive(inner.data(), hb, rest ? data.view(hb / sizeof(float), {rest}) : kernels::tensor{});
      return;
    }
    h.receive(header.data(), header_bytes, std::move(data));
  }

  static ucs_status_t on_am(void* arg, const void* header, std::size_t header_bytes, void* data, std::size_t length,
                            const ucp_am_recv_param_t* param) {
    auto* self = static_cast<impl*>(arg);
    if (header_bytes > self->opts.max_header_bytes || length > self->opts.max_data_bytes || length % sizeof(float)) {
      if (self->h.rejected)
        self->h.rejected("frame refused: header " + std::to_string(header_bytes) + " bytes, data " +
                         std::to_string(length) + " bytes (limits " + std::to_string(self->opts.max_header_bytes) +
                         ", " + std::to_string(self->opts.max_data_bytes) + ", data a whole number of floats)");
      return UCS_OK; // dropped (a rendezvous is released by UCX)
    }
    std::vector<std::uint64_t> hdr((header_bytes + 7) / 8);
    if (header_bytes)
      std::memcpy(hdr.data(), header, header_bytes);
    if (header_bytes == 16 && hdr[0] == mapped_marker) {
      const auto src = hdr[1];
      if (self->arena && src < static_cast<std::uint64_t>(self->size) && self->local[src] &&
          !self->can_ref[src].exchange(true) && self->peers_mapped.fetch_add(1) + 1 == self->local_peers())
        self->arena->unlink(); // every peer on the node has it mapped: a crash from here leaves nothing in /dev/shm
      return UCS_OK;
    }
    if (header_bytes >= 32 && hdr[0] == announce_marker) {
      self->on_announce(hdr, header_bytes);
      return UCS_OK;
    }
    if (header_bytes >= 8 && (hdr[0] == ref_marker || hdr[0] == release_marker)) {
      if (length != 0) {
        if (self->h.rejected)
          self->h.rejected("frame refused: a shared-memory reference with " + std::to_string(length) + " bytes of data");
      } else if (hdr[0] == ref_marker) {
        self->on_ref(hdr, header_bytes);
      } else {
        self->on_release(hdr, header_bytes);
      }
      return UCS_OK;
    }
    if (length == 0) {
      self->deliver(std::move(hdr), header_bytes, {});
      return UCS_OK;
    }
    auto buf = self->pool->get(length / sizeof(float));
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
      self->rndv.push_back(new pending_recv{self, std::move(hdr), header_bytes, data, length, std::move(buf)});
      return UCS_INPROGRESS;
    }
    std::memcpy(buf.data(), data, length);
    self->deliver(std::move(hdr), header_bytes, std::move(buf));
    return UCS_OK;
  }

  static void on_recv_done(void* request, ucs_status_t st, std::size_t, void* user) {
    std::unique_ptr<pending_recv> pr(static_cast<pending_recv*>(user));
    if (st == UCS_OK)
      pr->link->deliver(std::move(pr->header), pr->header_bytes, std::move(pr->buffer));
    else if (pr->link->h.rejected)
      pr->link->h.rejected(std::string("receiving a frame's data failed: ") + ucs_status_string(st));
    ucp_request_free(request);
  }

  void fetch_rendezvous() {
    auto todo = std::move(rndv);
    rndv.clear();
    for (auto* raw : todo) {
      std::unique_ptr<pending_recv> pr(raw);
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = on_recv_done;
      p.user_data = pr.get();
      void* req = ucp_am_recv_data_nbx(worker, pr->desc, pr->buffer.data(), pr->length, &p);
      if (req == nullptr) {
        deliver(std::move(pr->header), pr->header_bytes, std::move(pr->buffer));
      } else if (UCS_PTR_IS_ERR(req)) {
        if (h.rejected)
          h.rejected(std::string("receiving a frame's data failed: ") + ucs_status_string(UCS_PTR_STATUS(req)));
      } else {
        (void)pr.release(); // on_recv_done owns it now
      }
    }
  }

  /// Posts a send; true when it is still in progress (someone has to
  /// progress the worker for it to complete), false when UCX completed it
  /// inline or it failed.
  bool post(std::unique_ptr<pending_send> ps) {
    const int peer = ps->peer;
    if (dead[static_cast<std::size_t>(peer)].load()) {
      in_flight.fetch_sub(1);
      return false;
    }
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = &on_send_done;
    prm.user_data = ps.get();
    const void* buf = ps->data.defined() ? ps->data.data() : nullptr;
    const std::size_t len = ps->data.defined() ? ps->data.bytes() : 0;
    void* req = ucp_am_send_nbx(eps[static_cast<std::size_t>(peer)], am_id, ps->header.data(),
                                ps->header.size() * sizeof(std::uint64_t), buf, len, &prm);
    if (req == nullptr) {
      in_flight.fetch_sub(1);
      return false;
    }
    if (UCS_PTR_IS_ERR(req)) {
      in_flight.fetch_sub(1);
      report_peer(peer, std::string("send to rank ") + std::to_string(peer) +
                          " failed: " + ucs_status_string(UCS_PTR_STATUS(req)));
      return false;
    }
    (void)ps.release(); // on_send_done owns it now
    return true;
  }

  bool drain_queue() {
    if (queued.load(std::memory_order_acquire) == 0)
      return false;
    std::vector<std::unique_ptr<pending_send>> todo;
    {
      std::lock_guard<std::mutex> lk(queue_mu);
      todo.swap(queue);
      queued.store(0, std::memory_order_release);
    }
    for (auto& ps : todo)
      post(std::move(ps));
    return true;
  }

  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
  }

  /// One round of the progress loop from any thread, if the lock is free.
  bool poll_once() {
    std::unique_lock<std::mutex> lk(ucx_mu, std::try_to_lock);
    if (!lk.owns_lock() || stop.load(std::memory_order_relaxed))
      return false;
    driving = this;
    const bool posted = drain_queue();
    unsigned n = ucp_worker_progress(worker);
    if (!rndv.empty()) {
      fetch_rendezvous();
      ++n;
    }
    if (run_ready())
      ++n;
    drain_queue(); // (send() gave no signal for what this thread sent)
    driving = nullptr;
    last_poll_ns.store(now_ns(), std::memory_order_relaxed);
    return n > 0 || posted;
  }

  void run() {
    driving = this; // this thread only ever drives this link
    if (opts.progress_nice != 0 &&
        setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), opts.progress_nice) != 0)
      std::fprintf(stderr, "gradwire: could not set the progress thread's nice value to %d\n", opts.progress_nice);
    if (opts.pin_cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(opts.pin_cpu, &set);
      if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
        std::fprintf(stderr, "gradwire: could not pin the progress thread to CPU %d\n", opts.pin_cpu);
    }
    auto last = std::chrono::steady_clock::now();
    while (!stop.load(std::memory_order_relaxed)) {
      std::unique_lock<std::mutex> lk(ucx_mu);
      const bool posted = drain_queue();
      const unsigned n = ucp_worker_progress(worker) + (posted ? 1u : 0u);
      const bool handled = run_ready();
      if (!rndv.empty()) {
        fetch_rendezvous();
        run_ready();
        last = std::chrono::steady_clock::now();
        continue;
      }
      if (handled) {
        last = std::chrono::steady_clock::now();
        continue;
      }
      if (n) {
        last = std::chrono::steady_clock::now();
        continue;
      }
      if (std::chrono::steady_clock::now() - last < std::chrono::microseconds(opts.spin_us)) {
        if (opts.spin_yield) {
          lk.unlock();
          sched_yield();
        }
        continue;
      }
      if (ucp_worker_arm(worker) == UCS_ERR_BUSY || queued.load(std::memory_order_acquire) > 0)
        continue; // (a send queued before the arm would not wake the poll)
      lk.unlock();
      pollfd pfd{efd, POLLIN, 0};
      (void)::poll(&pfd, 1, 1); // 1 ms: also bounds any missed wake-up
      last = std::chrono::steady_clock::now() - std::chrono::microseconds(opts.spin_us / 2);
    }
  }
};

namespace {

/// Whether a UCX_TLS list ("posix,cma", "sm", "^tcp", "all") opens the
/// shared-memory transport `tl` ("posix" or "sysv").
bool tls_includes(const std::string& tls, const std::string& tl) {
  const bool negate = !tls.empty() && tls[0] == '^';
  bool listed = false;
  std::size_t at = negate ? 1 : 0;
  while (at <= tls.size()) {
    const auto comma = std::min(tls.find(',', at), tls.size());
    const auto item = tls.substr(at, comma - at);
    listed = listed || item == tl || item == "sm" || item == "shm" || item == "mm" || (!negate && item == "all");
    at = comma + 1;
  }
  return negate ? !listed : listed;
}

} // namespace

ucx_link::ucx_link(int rank, int size, ucx_options opts) : p_(std::make_unique<impl>(rank, size, std::move(opts))) {
  check(size >= 1 && rank >= 0 && rank < size, "rank " + std::to_string(rank) + " out of range for " +
                                                   std::to_string(size) + " processes");
  // The FIFO element size goes through the environment, which UCX reads
  // when the worker opens its interfaces: UCX 1.13 refuses this
  // transport-level name from ucp_config_modify ("invalid
  // configuration"). A user's own setting, found at the first link, wins;
  // otherwise each link gets what it asks for (held until the worker is
  // made, for links made at once), for the shared-memory transports its
  // TLS opens (a variable no transport reads draws UCX's warning).
  static const std::pair<const char*, const char*> fifo_vars[] = {{"posix", "UCX_POSIX_FIFO_ELEM_SIZE"},
                                                                   {"sysv", "UCX_SYSV_FIFO_ELEM_SIZE"}};
  static std::mutex env_mu;
  std::unique_lock<std::mutex> env_lk(env_mu);
  static const bool user_set = std::any_of(std::begin(fifo_vars), std::end(fifo_vars),
                                           [](const auto& tv) { return std::getenv(tv.second) != nullptr; });
  if (!user_set) {
    const char* env_tls = std::getenv("UCX_TLS");
    const std::string tls = !p_->opts.tls.empty() ? p_->opts.tls : env_tls != nullptr ? env_tls : "all";
    for (const auto& [tl, var] : fifo_vars) {
      if (p_->opts.fifo_elem_bytes > 0 && tls_includes(tls, tl))
        ::setenv(var, std::to_string(p_->opts.fifo_elem_bytes).c_str(), 1);
      else
        ::unsetenv(var);
    }
  }
  ucp_config_t* config = nullptr;
  ucs_check(ucp_config_read(nullptr, nullptr, &config), "reading the configuration");
  if (!p_->opts.tls.empty()) {
    auto st = ucp_config_modify(config, "TLS", p_->opts.tls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      ucs_check(st, ("setting TLS=" + p_->opts.tls).c_str());
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  auto st = ucp_init(&params, config, &p_->context);
  ucp_config_release(config);
  ucs_check(st, "initialising the context");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE; // only the progress thread calls UCX (and ucp_worker_signal)
  ucs_check(ucp_worker_create(p_->context, &wp, &p_->worker), "creating the worker");
  env_lk.unlock();
  ucs_check(ucp_worker_get_efd(p_->worker, &p_->efd), "getting the worker's event descriptor");
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = am_id;
  hp.cb = &impl::on_am;
  hp.arg = p_.get();
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucs_check(ucp_worker_set_am_recv_handler(p_->worker, &hp), "setting the message handler");
  p_->maps.resize(static_cast<std::size_t>(size));
  p_->local.assign(static_cast<std::size_t>(size), false);
  p_->held.resize(static_cast<std::size_t>(size));
  p_->deferred.resize(static_cast<std::size_t>(size));
}

void ucx_link::impl::open_arena() {
  if (opts.shm_refs && local_peers() > 0) {
    std::random_device rd;
    const std::string name = "/gradwire-" + std::to_string(::getpid()) + "-" + std::to_string(rank) + "-" +
                             std::to_string(rd() & 0xffffff);
    try {
      arena = std::make_shared<shm_arena>(name, opts.arena_bytes);
    } catch (const std::exception& e) { // no /dev/shm here: frames are copied, as with shm_refs off
      std::fprintf(stderr, "gradwire: rank %d: %s; every frame will be copied\n", rank, e.what());
      return;
    }
    std::weak_ptr<shm_arena> weak = arena;
    // Arena blocks are powers of two on their own alignment: every tensor
    // starts at its own offset (as cpu_backend does from 2 MiB, see
    // kernels/huge_pages.hpp), or weights, gradients and momentum alias.
    auto next = std::make_shared<std::atomic<unsigned>>(0);
    kernels::set_host_allocator([weak, next](std::size_t bytes, std::size_t) -> std::shared_ptr<kernels::storage> {
      auto a = weak.lock();
      return a ? a->allocate(bytes, (next->fetch_add(1) % 13) * 320) : nullptr;
    }, opts.min_ref_bytes);
  }
}

ucx_link::~ucx_link() {
  if (p_->arena)
    kernels::set_host_allocator({}, 0);
  close(2000);
  if (p_->worker)
    ucp_worker_destroy(p_->worker);
  if (p_->context)
    ucp_cleanup(p_->context);
}

std::uint64_t ucx_link::referenced() const { return p_->next_ref.load() - 1; }

std::size_t ucx_link::lent() const {
  std::lock_guard<std::mutex> lk(p_->refs_mu);
  std::size_t n = 0;
  for (const auto& m : p_->held)
    n += m.size();
  return n;
}

int ucx_link::peers_mapped() const { return p_->peers_mapped.load(); }

bool ucx_link::poll() {
  return p_->poll_once();
}

std::vector<std::uint8_t> ucx_link::address() const {
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  ucs_check(ucp_worker_get_address(p_->worker, &addr, &len), "getting the worker address");
  address_blob a;
  a.ucx.assign(reinterpret_cast<std::uint8_t*>(addr), reinterpret_cast<std::uint8_t*>(addr) + len);
  ucp_worker_release_address(p_->worker, addr);
  a.host = host_name();
  return pack_address(a);
}

void ucx_link::connect(const std::vector<std::vector<std::uint8_t>>& addresses) {
  check(static_cast<int>(addresses.size()) == p_->size, "connect: one address per rank expected");
  p_->eps.assign(addresses.size(), nullptr);
  const std::string host = host_name();
  for (int r = 0; r < p_->size; ++r) {
    if (r == p_->rank)
      continue;
    const auto blob = unpack_address(addresses[static_cast<std::size_t>(r)], r);
    p_->local[static_cast<std::size_t>(r)] = blob.host == host;
    p_->slots.push_back(std::make_unique<peer_slot>(peer_slot{p_.get(), r}));
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(blob.ucx.data());
    // Peer error-handling mode would rule out shared memory in UCX 1.13 (the
    // endpoint is "unreachable"): dead peers are found by node.hpp's
    // heartbeats instead; errors UCX does report still reach peer_error.
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = &impl::on_ep_error;
    ep.err_handler.arg = p_->slots.back().get();
    ucs_check(ucp_ep_create(p_->worker, &ep, &p_->eps[static_cast<std::size_t>(r)]),
              ("connecting to rank " + std::to_string(r)).c_str());
  }
  p_->open_arena();
}

int ucx_link::rank() const { return p_->rank; }
int ucx_link::size() const { return p_->size; }

void ucx_link::start(handlers h) {
  p_->h = std::move(h);
  if (p_->opts.progress_thread)
    p_->progress = std::thread([this] { p_->run(); });
  if (p_->arena) { // offer the peers on this node our arena (they answer once mapped)
    const auto& name = p_->arena->name();
    std::vector<std::uint64_t> ann = {announce_marker, static_cast<std::uint64_t>(p_->rank), p_->arena->size(), name.size()};
    ann.resize(4 + (name.size() + 7) / 8);
    std::memcpy(ann.data() + 4, name.data(), name.size());
    for (int r = 0; r < p_->size; ++r)
      if (p_->local[static_cast<std::size_t>(r)])
        p_->enqueue(r, ann);
  }
}

void ucx_link::send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool may_reference) {
  GW_CHECK(peer >= 0 && peer < p_->size && peer != p_->rank && !p_->eps.empty(),
           "send to rank " + std::to_string(peer) + ": no such peer");
  if (p_->dead[static_cast<std::size_t>(peer)].load())
    return; // reported once already
  if (may_reference && p_->arena && data.defined() && data.bytes() >= p_->opts.min_ref_bytes &&
      p_->can_ref[static_cast<std::size_t>(peer)].load() && header.size() + ref_words <= max_am_header / 8) {
    int owner = -1;
    std::int64_t off = -1;
    if (p_->locate(data, peer, owner, off)) {
      const auto id = p_->next_ref.fetch_add(1);
      std::vector<std::uint64_t> h2 = {ref_marker, static_cast<std::uint64_t>(p_->rank), id, static_cast<std::uint64_t>(owner),
                                       static_cast<std::uint64_t>(off), data.bytes()};
      h2.insert(h2.end(), header.begin(), header.end());
      {
        std::lock_guard<std::mutex> lk(p_->refs_mu);
        p_->held[static_cast<std::size_t>(peer)][id] = std::move(data); // until its release
      }
      header = std::move(h2);
      data = {};
    }
  }
  p_->in_flight.fetch_add(1);
  if (header.size() * sizeof(std::uint64_t) > max_am_header) { // [header words][data] behind a marker
    const std::size_t hb = header.size() * sizeof(std::uint64_t), db = data.defined() ? data.bytes() : 0;
    auto packed = kernels::tensor::empty({static_cast<std::int64_t>((hb + db) / sizeof(float))});
    std::memcpy(packed.data(), header.data(), hb);
    if (db)
      std::memcpy(reinterpret_cast<char*>(packed.data()) + hb, data.data(), db);
    header = {inline_marker, hb};
    data = std::move(packed);
  }
  auto ps = std::make_unique<pending_send>(pending_send{p_.get(), std::move(header), std::move(data), peer});
  // From the progress thread itself (an actor run by a frame's delivery,
  // inside a UCX callback): queue it for the loop. From any other thread:
  // post at once under the lock, unless the progress thread holds it.
  if (driving != p_.get()) {
    std::unique_lock<std::mutex> lk(p_->ucx_mu, std::try_to_lock);
    if (lk.owns_lock() && !p_->stop.load()) {
      // A send UCX could not complete at once (a rendezvous) needs someone
      // to progress the worker: the progress thread, unless a thread is
      // polling (a ring worker waiting for its neighbour), whose next poll
      // will. One completed inline (a shared-memory reference, any small
      // frame) needs no one: no signal, whose write took ~10 us of the
      // 38-47 us a chunk reference spent in send() (2-process ring
      // training) and woke the progress thread for nothing.
      if (p_->post(std::move(ps)) &&
          impl::now_ns() - p_->last_poll_ns.load(std::memory_order_relaxed) > 100'000)
        ucp_worker_signal(p_->worker);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lk(p_->queue_mu);
    p_->queue.push_back(std::move(ps));
    p_->queued.fetch_add(1, std::memory_order_release);
  }
  // The thread driving the worker drains the queue when this delivery
  // returns (run's next round, or the end of poll_once): no signal, whose
  // eventfd write is a syscall per frame (2 processes, 256 KiB allreduce:
  // two of them on each allreduce's critical path).
  if (driving != p_.get())
    ucp_worker_signal(p_->worker);
}

void ucx_link::close(int timeout_ms) {
  if (p_->progress.joinable()) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (p_->in_flight.load() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    p_->stop = true;
    ucp_worker_signal(p_->worker);
    p_->progress.join();
  } else { // the application drives the link: finish the sends in flight here
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (p_->in_flight.load() > 0 && std::chrono::steady_clock::now() < until)
      p_->poll_once();
    p_->stop = true;
  }
  for (auto& ep : p_->eps) {
    if (!ep)
      continue;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &prm);
    if (req && !UCS_PTR_IS_ERR(req)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
        ucp_worker_progress(p_->worker);
      ucp_request_free(req);
    }
    ep = nullptr;
  }
  {
    std::lock_guard<std::mutex> lk(p_->alive->mu);
    p_->alive->link = nullptr; // views still held elsewhere release nothing now
  }
  {
    std::lock_guard<std::mutex> lk(p_->refs_mu);
    for (auto& m : p_->held)
      m.clear();
  }
  if (p_->arena)
    p_->arena->unlink();
  for (auto* pr : p_->rndv) { // fetched never: hand the descriptors back
    ucp_am_data_release(p_->worker, pr->desc);
    std::unique_ptr<pending_recv> gone(pr);
  }
  p_->rndv.clear();
  p_->ready.clear(); // arrived during the close: no handler runs now
}

std::string ucx_link::describe() const {
  return "ucx" + (p_->opts.tls.empty() ? std::string() : " (TLS " + p_->opts.tls + ")") +
         (p_->arena ? ", ring chunks by shared-memory reference" : "");
}

} // namespace gradwire::transport
