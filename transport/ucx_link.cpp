/// @file ucx_link.cpp
/// ucx_link's life and send path: opening UCX (ucx_setup.cpp), connecting
/// to every peer from its worker address, sending (by shared-memory
/// reference where shm_lending can, else a copy; directly under the lock,
/// or queued for the thread driving the worker), and closing.

#include "transport/ucx_link_impl.hpp"
#include "transport/ucx_setup.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace gradwire::transport {

ucx_link::impl::impl(int r, int n, ucx_options o)
    : rank(r), size(n), opts(std::move(o)), dead(static_cast<std::size_t>(n)) {
  shm_lending::carrier c;
  c.send_control = [this](int peer, std::vector<std::uint64_t> header, bool wake) {
    enqueue(peer, std::move(header), wake);
  };
  c.deliver = [this](std::vector<std::uint64_t> header, std::size_t header_bytes, kernels::tensor data) {
    deliver(std::move(header), header_bytes, std::move(data));
  };
  c.reject = [this](const std::string& what) { reject(what); };
  c.peer_dead = [this](int peer) { return dead[static_cast<std::size_t>(peer)].load(); };
  lending = std::make_unique<shm_lending>(rank, size, opts.arena_bytes, opts.min_ref_bytes, opts.max_data_bytes,
                                          opts.token_hash, std::move(c));
}

void ucx_link::impl::enqueue(int peer, std::vector<std::uint64_t> header, bool wake) {
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

bool ucx_link::impl::post(std::unique_ptr<pending_send> ps) {
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
  void* req = ucp_am_send_nbx(eps[static_cast<std::size_t>(peer)], ucx_am_id, ps->header.data(),
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
  posted.insert(ps.get());
  (void)ps.release(); // on_send_done owns it now
  return true;
}

bool ucx_link::impl::drain_queue() {
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

void ucx_link::impl::report_peer(int peer, const std::string& what) {
  if (closed.load(std::memory_order_acquire)) // a send purged by the close: its owner may be gone
    return;
  if (peer < 0 || peer >= size || dead[static_cast<std::size_t>(peer)].exchange(true))
    return;
  lending->forget(peer);
  if (h.peer_error)
    h.peer_error(peer, what);
}

void ucx_link::impl::on_ep_error(void* arg, ucp_ep_h, ucs_status_t st) {
  auto* s = static_cast<peer_slot*>(arg);
  s->link->report_peer(s->rank, std::string("connection to rank ") + std::to_string(s->rank) +
                                  " failed: " + ucs_status_string(st));
}

void ucx_link::impl::on_send_done(void* request, ucs_status_t st, void* user) {
  std::unique_ptr<pending_send> ps(static_cast<pending_send*>(user));
  ps->link->posted.erase(ps.get());
  if (st != UCS_OK)
    ps->link->report_peer(ps->peer, std::string("send to rank ") + std::to_string(ps->peer) +
                                      " failed: " + ucs_status_string(st));
  ps->link->in_flight.fetch_sub(1);
  ucp_request_free(request);
}

ucx_link::ucx_link(int rank, int size, ucx_options opts) {
  check(size >= 1 && rank >= 0 && rank < size, "rank " + std::to_string(rank) + " out of range for " +
                                                   std::to_string(size) + " processes");
  if (ucx_setup::tls_tcp_only(ucx_setup::effective_tls(opts)))
    for (auto& kv : ucx_setup::tcp_only_config())
      if (std::none_of(opts.ucx_config.begin(), opts.ucx_config.end(), [&](const auto& c) { return c.first == kv.first; }))
        opts.ucx_config.push_back(std::move(kv));
  p_ = std::make_unique<impl>(rank, size, std::move(opts));
  p_->fifo = ucx_setup::open(p_->opts, p_->context, p_->worker);
  ucx_setup::check_status(ucp_worker_get_efd(p_->worker, &p_->efd), "getting the worker's event descriptor");
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = ucx_am_id;
  hp.cb = &impl::on_am;
  hp.arg = p_.get();
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucx_setup::check_status(ucp_worker_set_am_recv_handler(p_->worker, &hp), "setting the message handler");
}

ucx_link::~ucx_link() {
  close(2000);
  if (p_->worker)
    ucp_worker_destroy(p_->worker);
  for (auto* ps : p_->posted) // dropped by UCX, never completed: no callback will free them
    delete ps;
  p_->posted.clear();
  if (p_->context)
    ucp_cleanup(p_->context);
}

std::uint64_t ucx_link::referenced() const { return p_->lending->referenced(); }
std::size_t ucx_link::lent() const { return p_->lending->lent(); }
std::vector<std::uint64_t> ucx_link::referenced_by_peer() const { return p_->lending->referenced_by_peer(); }
int ucx_link::peers_mapped() const { return p_->lending->peers_mapped(); }
kernels::host_allocator ucx_link::arena_allocator() const { return p_->lending->allocator(); }
bool ucx_link::poll() { return p_->poll_once(); }
int ucx_link::rank() const { return p_->rank; }
int ucx_link::size() const { return p_->size; }

std::vector<std::uint8_t> ucx_link::address() const {
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  ucx_setup::check_status(ucp_worker_get_address(p_->worker, &addr, &len), "getting the worker address");
  ucx_setup::address a;
  a.ucx.assign(reinterpret_cast<std::uint8_t*>(addr), reinterpret_cast<std::uint8_t*>(addr) + len);
  ucp_worker_release_address(p_->worker, addr);
  a.host = ucx_setup::host_identity();
  a.fifo = p_->fifo;
  return ucx_setup::pack(a);
}

std::string ucx_link::check_address(const std::vector<std::uint8_t>& blob) const {
  ucx_setup::address peer;
  try {
    peer = ucx_setup::unpack(blob, -1);
  } catch (const error&) {
    return "not a whole gradwire address";
  }
  return ucx_setup::ucx_parse_check(peer.ucx);
}

void ucx_link::connect(const std::vector<std::vector<std::uint8_t>>& addresses) {
  check(static_cast<int>(addresses.size()) == p_->size, "connect: one address per rank expected");
  p_->eps.assign(addresses.size(), nullptr);
  const std::string host = ucx_setup::host_identity(); // memory is shared only where all of it agrees
  std::vector<ucx_setup::address> peers(addresses.size());
  for (int r = 0; r < p_->size; ++r) { // every address checked before any endpoint exists
    if (r == p_->rank)
      continue;
    peers[static_cast<std::size_t>(r)] = ucx_setup::unpack(addresses[static_cast<std::size_t>(r)], r);
    const auto& peer = peers[static_cast<std::size_t>(r)];
    check(peer.host != host || peer.fifo == p_->fifo,
          "rank " + std::to_string(r) + " shares this host but opened UCX with shared-memory FIFO elements \"" +
            peer.fifo + "\", this rank with \"" + p_->fifo + "\": a send into its FIFO would crash. Set " +
            "UCX_POSIX_FIFO_ELEM_SIZE / UCX_SYSV_FIFO_ELEM_SIZE the same on every rank, or on none");
  }
  for (int r = 0; r < p_->size; ++r) {
    if (r == p_->rank)
      continue;
    const auto& blob = peers[static_cast<std::size_t>(r)];
    p_->lending->set_local(r, blob.host == host);
    p_->slots.push_back(std::make_unique<impl::peer_slot>(impl::peer_slot{p_.get(), r}));
    p_->eps[static_cast<std::size_t>(r)] = p_->open_endpoint(r, blob);
  }
  if (p_->opts.shm_refs)
    p_->lending->open_arena();
  ucx_setup::restrict_sysv_segments(); // any made while connecting
}

ucp_ep_h ucx_link::impl::open_endpoint(int r, const ucx_setup::address& blob) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(blob.ucx.data());
  // Peer error-handling mode would rule out shared memory in UCX 1.13 (the
  // endpoint is "unreachable"): dead peers are found by node.hpp's
  // heartbeats instead; errors UCX does report still reach peer_error.
  ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = &impl::on_ep_error;
  for (const auto& sl : slots)
    if (sl->rank == r)
      ep.err_handler.arg = sl.get();
  ucp_ep_h out = nullptr;
  ucx_setup::check_status(ucp_ep_create(worker, &ep, &out), ("connecting to rank " + std::to_string(r)).c_str());
  return out;
}

void ucx_link::reconnect(int peer, const std::vector<std::uint8_t>& address) {
  check(peer >= 0 && peer < p_->size && peer != p_->rank && !p_->eps.empty(),
        "reconnect to rank " + std::to_string(peer) + ": no such peer");
  const auto blob = ucx_setup::unpack(address, peer);
  const std::string host = ucx_setup::host_identity();
  check(blob.host != host || blob.fifo == p_->fifo,
        "rank " + std::to_string(peer) + "'s new process shares this host but opened UCX with shared-memory FIFO "
        "elements \"" + blob.fifo + "\", this rank with \"" + p_->fifo + "\"");
  // Under the lock that makes UCX one thread at a time, unless this thread
  // holds it already (a frame's handler: rank 0's word of the new address).
  std::unique_lock<std::mutex> lk(p_->ucx_mu, std::defer_lock);
  if (impl::driving != p_.get())
    lk.lock();
  auto& ep = p_->eps[static_cast<std::size_t>(peer)];
  auto fresh = p_->open_endpoint(peer, blob);
  if (ep)
    p_->retired.push_back(ep); // to the old process: closed with the others at the end
  ep = fresh;
  p_->lending->set_local(peer, blob.host == host);
  p_->lending->reset_peer(peer);
  p_->dead[static_cast<std::size_t>(peer)] = false;
}

void ucx_link::start(handlers h) {
  p_->h = std::move(h);
  if (p_->opts.progress_thread)
    p_->progress = std::thread([this] { p_->run(); });
  p_->lending->announce(); // the peers on this node answer once they have mapped our arena
}

void ucx_link::send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool may_reference) {
  GW_CHECK(peer >= 0 && peer < p_->size && peer != p_->rank && !p_->eps.empty(),
           "send to rank " + std::to_string(peer) + ": no such peer");
  if (p_->dead[static_cast<std::size_t>(peer)].load())
    return; // reported once already
  if (may_reference && header.size() + shm_lending::ref_words <= ucx_max_am_header / 8)
    p_->lending->lend(peer, header, data);
  p_->in_flight.fetch_add(1);
  if (header.size() * sizeof(std::uint64_t) > ucx_max_am_header) { // [header words][data] behind a marker
    const std::size_t hb = header.size() * sizeof(std::uint64_t), db = data.defined() ? data.bytes() : 0;
    auto packed = kernels::tensor::empty({static_cast<std::int64_t>((hb + db) / sizeof(float))});
    std::memcpy(packed.data(), header.data(), hb);
    if (db)
      std::memcpy(reinterpret_cast<char*>(packed.data()) + hb, data.data(), db);
    header = {ucx_inline_marker, hb};
    data = std::move(packed);
  }
  auto ps = std::make_unique<impl::pending_send>(impl::pending_send{p_.get(), std::move(header), std::move(data), peer});
  // From any thread but the one driving the worker: post at once under the
  // lock, unless another thread holds it.
  if (impl::driving != p_.get()) {
    std::unique_lock<std::mutex> lk(p_->ucx_mu, std::try_to_lock);
    if (lk.owns_lock() && !p_->stop.load()) {
      // What this thread queued while another held the lock goes first:
      // frames from one thread to one peer keep their order.
      const bool drained = p_->drain_queue();
      // A send UCX could not complete at once (a rendezvous) needs someone
      // to progress the worker: the progress thread, unless a thread polled
      // lately, whose next poll will. One completed inline (a reference,
      // any small frame) needs no one, and no signal (an eventfd write).
      if ((p_->post(std::move(ps)) || drained) && impl::now_ns() - p_->last_poll_ns.load(std::memory_order_relaxed) > 100'000)
        ucp_worker_signal(p_->worker);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lk(p_->queue_mu);
    p_->queue.push_back(std::move(ps));
    p_->queued.fetch_add(1, std::memory_order_release);
  }
  // The thread driving the worker drains the queue when the delivery that
  // sent this returns: no signal (an eventfd write, a syscall per frame).
  if (impl::driving != p_.get())
    ucp_worker_signal(p_->worker);
}

void ucx_link::close(int timeout_ms) {
  if (p_->closed.load(std::memory_order_acquire))
    return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (p_->progress.joinable()) {
    while (p_->in_flight.load() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    p_->stop = true;
    ucp_worker_signal(p_->worker);
    p_->progress.join();
  } else { // the application drives the link: finish the sends in flight here
    while (p_->in_flight.load() > 0 && std::chrono::steady_clock::now() < until)
      p_->poll_once();
    p_->stop = true;
  }
  p_->closed.store(true, std::memory_order_release);
  for (auto* ep : p_->retired)
    p_->eps.push_back(ep);
  p_->retired.clear();
  for (auto& ep : p_->eps) {
    if (!ep)
      continue;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &prm);
    if (req && !UCS_PTR_IS_ERR(req)) {
      const auto by = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < by)
        ucp_worker_progress(p_->worker);
      ucp_request_free(req);
    }
    ep = nullptr;
  }
  p_->lending->close();
  for (auto* pr : p_->rndv) { // fetched never: hand the descriptors back
    ucp_am_data_release(p_->worker, pr->desc);
    std::unique_ptr<impl::pending_recv> gone(pr);
  }
  p_->rndv.clear();
  p_->ready.clear(); // arrived during the close: no handler runs now
}

std::string ucx_link::describe() const {
  std::string eager;
  for (const auto& [name, value] : p_->opts.ucx_config)
    if (name == "RNDV_THRESH" && std::getenv("UCX_RNDV_THRESH") == nullptr)
      eager = ", frames up to " + value + " eager";
  return "ucx" + (p_->opts.tls.empty() ? std::string() : " (TLS " + p_->opts.tls + eager + ")") +
         (p_->lending->active() ? ", lendable tensors by shared-memory reference" : "");
}

} // namespace gradwire::transport
