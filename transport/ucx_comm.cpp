#include "transport/ucx_comm_impl.hpp"
#include "kernels/log.hpp"

#include "transport/comm_address.hpp"

#include <cstdio>
#include <utility>

namespace gradwire::transport {

ucx_comm::ucx_comm(int rank, int size, comm_options opts) : p_(std::make_unique<impl>()) {
  check(size >= 1 && size <= 0xffff && rank >= 0 && rank < size,
        "collective communicator: rank " + std::to_string(rank) + " of " + std::to_string(size));
  p_->rank = rank;
  p_->size = size;
  p_->opts = std::move(opts);
  // Eager messages up to 256 KiB across hosts: below it, UCX's
  // rendezvous handshake costs more than the copy it saves. On this host,
  // without CMA, UCX's rendezvous falls back to a slow pipeline: every
  // size eager. Both were timed at 2 ranks (bench/RESULTS.md, "Figures behind the code").
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
      log::warn("rank {}: {}; the collective sums through UCX", rank, e.what());
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

ucx_comm::impl::peer_addresses ucx_comm::impl::read_addresses(const std::vector<std::vector<std::uint8_t>>& addresses,
                                                               const std::vector<bool>& same_host) {
  const auto n = addresses.size();
  peer_addresses out;
  out.ucx.resize(n);
  out.lanes.resize(n);
  out.segments.resize(n);
  on_lane.assign(n, false);
  // Every rank offered a segment: every rank reads the same table, so every
  // rank decides alike whether (and among whom) the sums go through shared memory.
  out.all_segments = shm != nullptr;
  for (int r = 0; r < size; ++r) { // every address checked before any endpoint exists
    if (r == rank)
      continue;
    const auto i = static_cast<std::size_t>(r);
    auto a = comm_detail::unpack(addresses[i], r);
    out.segments[i] = std::move(a.segment);
    out.all_segments = out.all_segments && !out.segments[i].empty();
    if (lanes && comm_detail::by_lane(opts.net, opts.tls, same_host[i])) {
      check(!a.lanes.empty(), "collective communicator: rank " + std::to_string(r) +
                                  " opened no TCP lanes (is --net the same on every rank?)");
      on_lane[i] = true;
      any_lane = true;
      out.lanes[i] = std::move(a.lanes);
      continue;
    }
    out.ucx[i] = same_host[i] ? std::move(a.here) : std::move(a.away);
    const auto why = ucx_setup::ucx_parse_check(out.ucx[i]);
    check(why.empty(), "collective communicator: rank " + std::to_string(r) + "'s address: " + why);
  }
  return out;
}

void ucx_comm::impl::create_endpoints(const std::vector<std::vector<std::uint8_t>>& chosen,
                                      const std::vector<bool>& same_host) {
  eps.assign(chosen.size(), nullptr);
  worker_of.assign(chosen.size(), nullptr);
  for (int r = 0; r < size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (r == rank || on_lane[i])
      continue;
    auto& sd = sides[same_host[i] ? 0 : 1];
    sd.used = true;
    worker_of[i] = sd.worker;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(chosen[i].data());
    ucx_setup::check_status(ucp_ep_create(sd.worker, &ep, &eps[i]),
                            ("collective communicator: connecting to rank " + std::to_string(r)).c_str());
  }
}

// One host: shared-memory sums among all. Several hosts, some of 2 or more
// ranks: hierarchical (every rank decides alike from the same table). A
// first sum tells each rank that every peer of its host has mapped its
// segment: its name can go from /dev/shm. --net sockets: TCP between the
// ranks of a host too, as asked.
void ucx_comm::impl::start_sums(const comm_detail::host_layout& layout, const peer_addresses& peers) {
  const bool local_by_lane = lanes && comm_detail::by_lane(opts.net, opts.tls, true);
  const bool local_sums = shm && peers.all_segments && !local_by_lane && layout.largest >= 2;
  hier = local_sums && layout.hosts > 1;
  hosts = layout.hosts;
  owners = layout.owners;
  largest = layout.largest;
  if (hier) {
    across = layout.across;
    across_index = layout.host_index;
  }
  if (local_sums && layout.local.size() >= 2) {
    shm->connect(peers.segments, layout.local, layout.owners, layout.uniform);
    float one = 1;
    shm->allreduce(&one, 1);
    shm->unlink();
  } else {
    shm.reset(); // (a rank alone on its host sums across hosts only)
  }
}

void ucx_comm::connect(const std::vector<std::vector<std::uint8_t>>& addresses, const std::vector<int>& host_of) {
  check(static_cast<int>(addresses.size()) == p_->size && host_of.size() == addresses.size(),
        "collective communicator: one address per rank expected");
  const auto layout = comm_detail::layout_of(host_of, p_->rank);
  std::vector<bool> same_host(addresses.size());
  for (std::size_t r = 0; r < addresses.size(); ++r)
    same_host[r] = host_of[r] == host_of[static_cast<std::size_t>(p_->rank)];
  const auto peers = p_->read_addresses(addresses, same_host);
  p_->create_endpoints(peers.ucx, same_host);
  if (p_->lanes)
    p_->lanes->connect(peers.lanes, p_->on_lane);
  p_->start_sums(layout, peers);
  p_->connected = true;
  ucx_setup::restrict_sysv_segments();
}

bool ucx_comm::by_shared_memory() const { return p_->shm != nullptr && p_->connected && !p_->hier; }

bool ucx_comm::hierarchical() const { return p_->hier && p_->connected; }

bool ucx_comm::by_lane(int peer) const {
  return peer >= 0 && static_cast<std::size_t>(peer) < p_->on_lane.size() && p_->on_lane[static_cast<std::size_t>(peer)];
}

allreduce_algo ucx_comm::choose(std::size_t n) const {
  if (by_shared_memory())
    return allreduce_algo::shared_memory;
  if (hierarchical())
    return allreduce_algo::hierarchical;
  return n * sizeof(float) < p_->ring_from() ? allreduce_algo::recursive_doubling : allreduce_algo::ring;
}

void ucx_comm::allreduce(float* data, std::size_t n, allreduce_algo algo) {
  if (p_->broken || p_->aborted.load(std::memory_order_relaxed) ||
      (p_->size > 1 && !p_->connected)) // (no message built on the hot path)
    throw error("allreduce (rank " + std::to_string(p_->rank) + "): the communicator " +
                (p_->aborted.load() ? "was given up" : p_->broken ? "failed earlier" : "is not connected"));
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
  if (algo == allreduce_algo::hierarchical) {
    if (!hierarchical())
      throw error("allreduce (rank " + std::to_string(p_->rank) +
                  "): hierarchical sums need 2 or more hosts, some of 2 or more ranks, each offering shared memory");
    // Ranks call across hosts unequally often (none past the smallest
    // host's count; one fewer where a slice is empty): every rank leaves
    // with the same collective number, past any its group used.
    const std::uint32_t first = p_->seq;
    try {
      if (p_->shm && p_->across.empty())
        p_->shm->allreduce(data, n);
      else if (p_->shm)
        p_->shm->allreduce(data, n, [this](float* d, std::size_t m) { p_->across_hosts(d, m); });
      else // alone on this host: its slices across, as its partners' hosts hand them
        shm_allreduce::each_slice(n, p_->owners, 0, [&](std::size_t a, std::size_t b) { p_->across_hosts(data + a, b - a); });
    } catch (...) {
      p_->broken = true;
      throw;
    }
    p_->seq = first + static_cast<std::uint32_t>(shm_allreduce::pieces(n, p_->owners));
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

void ucx_comm::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(p_->abort_mu);
    if (p_->aborted.load())
      return;
    p_->abort_why = why;
  }
  p_->aborted.store(true);
  if (p_->shm)
    p_->shm->abort();
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
  if (hierarchical()) {
    const int h = p_->hosts;
    const std::string per = p_->owners == p_->largest ? std::to_string(p_->owners)
                                                      : std::to_string(p_->owners) + " to " + std::to_string(p_->largest);
    const std::string carriers = p_->owners == p_->largest ? "among the ranks of one local index"
                                 : p_->owners == 1       ? "by one rank per host (the smallest host has one)"
                                                         : "among the ranks of one local index below " +
                                                       std::to_string(p_->owners) + " (the smallest host's count)";
    return driver + "hierarchical at every size: " + std::to_string(h) + " hosts of " + per +
           " ranks, sums through shared memory within a host, and across hosts " + carriers + " (" +
           (lanes == 0 ? std::string("UCX")
                       : "TCP lanes to " + std::to_string(lanes) + " of " + std::to_string(p_->size - 1) + " peers") +
           "; recursive doubling below " +
           std::to_string(p_->ring_from(h) >> 10) + " KiB, ring from there)";
  }
  return driver + "recursive doubling below " +
         std::to_string(p_->ring_from() >> 10) + " KiB, ring from there; " +
         "UCX shared memory to ranks on this host (every size eager), " +
         (lanes == 0 ? std::string("UCX tag matching to other hosts (rendezvous from 256 KiB)")
                     : "TCP lanes to " + std::to_string(lanes) + " of " + std::to_string(p_->size - 1) +
                           " peers (gradwire's own sockets)");
}

} // namespace gradwire::transport
