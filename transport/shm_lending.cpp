#include "transport/shm_lending.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"


#include <cstdio>
#include <cstring>

namespace gradwire::transport {

namespace {
constexpr std::uint64_t ref_marker = 0x475753484d524546ull;      // "GWSHMREF"
constexpr std::uint64_t release_marker = 0x475753484d52454cull;  // "GWSHMREL"
constexpr std::uint64_t announce_marker = 0x475753484d414e4eull; // "GWSHMANN"
constexpr std::uint64_t mapped_marker = 0x475753484d4d4150ull;   // "GWSHMMAP"
constexpr std::size_t max_name = 200;
} // namespace

shm_lending::shm_lending(int rank, int size, std::size_t arena_bytes, std::size_t min_ref_bytes,
                         std::size_t max_data_bytes, std::uint64_t token, carrier c)
    : rank_(rank), size_(size), arena_bytes_(arena_bytes), min_ref_bytes_(min_ref_bytes),
      max_data_bytes_(max_data_bytes), token_(token), c_(std::move(c)), maps_(static_cast<std::size_t>(size)),
      local_(static_cast<std::size_t>(size), false), can_ref_(static_cast<std::size_t>(size)),
      refs_to_(static_cast<std::size_t>(size)),
      held_(static_cast<std::size_t>(size)), deferred_(static_cast<std::size_t>(size)),
      unmappable_(static_cast<std::size_t>(size), false) {
  alive_->self = this;
}

shm_lending::~shm_lending() { close(); }

void shm_lending::set_local(int r, bool local) { local_[static_cast<std::size_t>(r)] = local; }

int shm_lending::local_peers() const {
  int n = 0;
  for (bool l : local_)
    n += l ? 1 : 0;
  return n;
}

void shm_lending::open_arena() {
  if (local_peers() == 0)
    return;
  const std::string name = arena_name(rank_);
  try {
    arena_ = std::make_shared<shm_arena>(name, arena_bytes_);
  } catch (const std::exception& e) { // no /dev/shm here: frames are copied, as with shm_refs off
    log::warn("rank {}: {}; every frame will be copied", rank_, e.what());
  }
}

kernels::host_allocator shm_lending::allocator() const {
  if (!arena_)
    return {};
  std::weak_ptr<shm_arena> weak = arena_;
  // Arena blocks are powers of two on their own alignment: every tensor
  // starts at its own offset (as cpu_backend does from 2 MiB, see
  // kernels/huge_pages.hpp), or weights, gradients and momentum alias.
  auto next = std::make_shared<std::atomic<unsigned>>(0);
  return [weak, next](std::size_t bytes, std::size_t) -> std::shared_ptr<kernels::storage> {
    auto a = weak.lock();
    return a ? a->allocate(bytes, (next->fetch_add(1) % 13) * 320) : nullptr;
  };
}

void shm_lending::announce() {
  if (!arena_)
    return;
  const auto& name = arena_->name();
  std::vector<std::uint64_t> ann = {announce_marker, token_, static_cast<std::uint64_t>(rank_), arena_->size(),
                                    name.size()};
  ann.resize(5 + (name.size() + 7) / 8);
  std::memcpy(ann.data() + 5, name.data(), name.size());
  for (int r = 0; r < size_; ++r)
    if (local_[static_cast<std::size_t>(r)])
      c_.send_control(r, ann, true);
}

bool shm_lending::on_frame(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes, std::size_t data_bytes) {
  if (header_bytes < 8 || (hdr[0] != mapped_marker && hdr[0] != announce_marker && hdr[0] != ref_marker &&
                           hdr[0] != release_marker))
    return false;
  if (header_bytes < 16 || hdr[1] != token_) {
    c_.reject("frame refused: a shared-memory control frame without this job's token");
    return true;
  }
  if (header_bytes == 24 && hdr[0] == mapped_marker) {
    on_mapped(hdr);
    return true;
  }
  if (header_bytes >= 40 && hdr[0] == announce_marker) {
    on_announce(hdr, header_bytes);
    return true;
  }
  if (hdr[0] == ref_marker || hdr[0] == release_marker) {
    if (data_bytes != 0)
      c_.reject("frame refused: a shared-memory reference with " + std::to_string(data_bytes) + " bytes of data");
    else if (hdr[0] == ref_marker)
      on_ref(hdr, header_bytes);
    else
      on_release(hdr, header_bytes);
    return true;
  }
  c_.reject("frame refused: a malformed shared-memory control frame");
  return true;
}

void shm_lending::on_mapped(const std::vector<std::uint64_t>& hdr) {
  const auto src = hdr[2];
  if (arena_ && src < static_cast<std::uint64_t>(size_) && local_[src] && !can_ref_[src].exchange(true) &&
      peers_mapped_.fetch_add(1) + 1 == local_peers())
    arena_->unlink(); // every peer on the node has it mapped: a crash from here leaves nothing in /dev/shm
}

void shm_lending::on_announce(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes) {
  const auto src = hdr[2], bytes = hdr[3], len = hdr[4];
  if (!arena_)
    return; // shm_refs off here (or no shared memory): that peer goes on copying
  if (src >= static_cast<std::uint64_t>(size_) || !local_[src] || len > max_name || 40 + len > header_bytes) {
    c_.reject("frame refused: malformed or unexpected shared-memory announcement");
    return;
  }
  std::string name(reinterpret_cast<const char*>(hdr.data() + 5), len);
  if (!is_arena_name(name)) {
    c_.reject("frame refused: a shared-memory announcement that names no gradwire arena");
    return;
  }
  try {
    auto m = std::make_shared<shm_mapping>(name, bytes);
    std::vector<std::pair<std::vector<std::uint64_t>, std::size_t>> waiting;
    {
      std::lock_guard<std::mutex> lk(mu_);
      maps_[src] = std::move(m);
      waiting.swap(deferred_[src]);
    }
    c_.send_control(static_cast<int>(src), {mapped_marker, token_, static_cast<std::uint64_t>(rank_)}, true);
    for (const auto& [hd, hb] : waiting) // passed on by a third rank before this arrived
      on_ref(hd, hb);
  } catch (const std::exception& e) { // that peer keeps copying its frames to us
    // Through reject: its log is bounded, so a peer cannot flood stderr with announcements.
    c_.reject("frame refused: " + std::string(e.what()) + " (rank " + std::to_string(src) +
              "'s frames will be copied)");
    std::lock_guard<std::mutex> lk(mu_);
    unmappable_[src] = true;
    if (!deferred_[src].empty())
      c_.reject("frame refused: " + std::to_string(deferred_[src].size()) + " reference(s) into rank " +
                std::to_string(src) + "'s memory, which could not be mapped");
    deferred_[src].clear();
  }
}

std::shared_ptr<shm_mapping> shm_lending::mapping(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  return maps_[static_cast<std::size_t>(r)];
}

shm_lending::lookup shm_lending::memory_of(int owner, const std::vector<std::uint64_t>& hdr,
                                           std::size_t header_bytes, lent_memory& out, std::string& why) {
  if (owner == rank_) { // our own memory, come back round the ring
    out = {arena_->base(), arena_->size(), arena_};
    return lookup::found;
  }
  if (auto m = mapping(owner)) {
    out = {m->base(), m->size(), m};
    return lookup::found;
  }
  const auto o = static_cast<std::size_t>(owner);
  if (!local_[o] || c_.peer_dead(owner)) {
    why = "into rank " + std::to_string(owner) + "'s memory, which this process has not mapped";
    return lookup::refused;
  }
  // Passed on from a third rank on this node whose announcement is still on its way.
  std::lock_guard<std::mutex> lk(mu_);
  auto& m2 = maps_[o];
  if (m2) {
    out = {m2->base(), m2->size(), m2};
    return lookup::found;
  }
  if (unmappable_[o] || deferred_[o].size() >= max_deferred) {
    why = "into rank " + std::to_string(owner) + "'s memory, which " +
          (unmappable_[o] ? std::string("could not be mapped (its announcement was refused)")
                          : "has not been announced (" + std::to_string(max_deferred) +
                              " references already wait for it)");
    return lookup::refused;
  }
  deferred_[o].emplace_back(hdr, header_bytes);
  return lookup::deferred;
}

void shm_lending::on_ref(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes) {
  auto refuse = [&](const std::string& why) { c_.reject("frame refused: shared-memory reference " + why); };
  if (header_bytes < ref_words * 8 || !arena_)
    return refuse(arena_ ? "too short" : "but this process has no shared memory (shm_refs off)");
  const auto src = static_cast<std::int64_t>(hdr[2]), owner = static_cast<std::int64_t>(hdr[4]);
  const std::uint64_t id = hdr[3], off = hdr[5], bytes = hdr[6];
  if (src < 0 || src >= size_ || src == rank_ || owner < 0 || owner >= size_)
    return refuse("from rank " + std::to_string(src) + " to rank " + std::to_string(owner) + "'s memory: no such rank");
  lent_memory mem;
  std::string why;
  const auto found = memory_of(static_cast<int>(owner), hdr, header_bytes, mem, why);
  if (found == lookup::refused)
    return refuse(why);
  if (found == lookup::deferred)
    return;
  if (bytes == 0 || bytes % sizeof(float) || bytes > max_data_bytes_ || off > mem.limit || bytes > mem.limit - off)
    return refuse("of " + std::to_string(bytes) + " bytes at " + std::to_string(off) + " in rank " +
                  std::to_string(owner) + "'s memory (" + std::to_string(mem.limit) + " bytes)");
  const char* p = mem.base + off;
  auto token = alive_;
  auto st = std::make_shared<kernels::storage>(const_cast<char*>(p), bytes, kernels::device::cpu(),
                                               [token, keep = mem.keep, src, id, me = rank_, job = token_](void*) {
                                                 std::lock_guard<std::mutex> lk(token->mu);
                                                 // No wake-up of the progress thread: the release goes
                                                 // out with the next round of traffic (or the loop's
                                                 // 1 ms poll).
                                                 if (token->self)
                                                   token->self->c_.send_control(
                                                     static_cast<int>(src),
                                                     {release_marker, job, static_cast<std::uint64_t>(me), id}, false);
                                               });
  kernels::tensor view(st, 0, {static_cast<std::int64_t>(bytes / sizeof(float))}, kernels::dtype::f32);
  std::vector<std::uint64_t> inner(hdr.begin() + ref_words, hdr.end());
  c_.deliver(std::move(inner), header_bytes - ref_words * 8, std::move(view));
}

void shm_lending::on_release(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes) {
  if (header_bytes != 4 * 8 || hdr[2] >= static_cast<std::uint64_t>(size_)) {
    c_.reject("frame refused: malformed shared-memory release");
    return;
  }
  std::lock_guard<std::mutex> lk(mu_);
  held_[hdr[2]].erase(hdr[3]);
}

bool shm_lending::locate(const kernels::tensor& t, int peer, int& owner, std::int64_t& offset) {
  offset = arena_->offset_of(t.data(), t.bytes());
  if (offset >= 0) {
    owner = rank_;
    return true;
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (int q = 0; q < size_; ++q) { // the receiver's memory, or a third rank's on this node
    if (q != peer && !local_[static_cast<std::size_t>(q)])
      continue;
    const auto& m = maps_[static_cast<std::size_t>(q)];
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

bool shm_lending::lend(int peer, std::vector<std::uint64_t>& header, kernels::tensor& data) {
  const auto p = static_cast<std::size_t>(peer);
  // Never to a rank on another host: it cannot map this arena.
  if (!arena_ || !data.defined() || data.bytes() < min_ref_bytes_ || !local_[p] || !can_ref_[p].load())
    return false;
  int owner = -1;
  std::int64_t off = -1;
  if (!locate(data, peer, owner, off))
    return false;
  const auto id = next_ref_.fetch_add(1);
  std::vector<std::uint64_t> h2 = {ref_marker, token_, static_cast<std::uint64_t>(rank_), id, static_cast<std::uint64_t>(owner),
                                   static_cast<std::uint64_t>(off), data.bytes()};
  h2.insert(h2.end(), header.begin(), header.end());
  {
    std::lock_guard<std::mutex> lk(mu_);
    held_[static_cast<std::size_t>(peer)][id] = std::move(data); // until its release
  }
  header = std::move(h2);
  data = {};
  refs_to_[p].fetch_add(1);
  return true;
}

std::vector<std::uint64_t> shm_lending::referenced_by_peer() const {
  std::vector<std::uint64_t> out;
  for (const auto& n : refs_to_)
    out.push_back(n.load());
  return out;
}

void shm_lending::forget(int peer) {
  std::lock_guard<std::mutex> lk(mu_);
  held_[static_cast<std::size_t>(peer)].clear(); // it will not release them
  deferred_[static_cast<std::size_t>(peer)].clear();
}

void shm_lending::reset_peer(int peer) {
  const auto p = static_cast<std::size_t>(peer);
  can_ref_[p] = false;
  std::lock_guard<std::mutex> lk(mu_);
  held_[p].clear();
  deferred_[p].clear();
  maps_[p].reset();
  unmappable_[p] = false;
}

void shm_lending::close() {
  {
    std::lock_guard<std::mutex> lk(alive_->mu);
    alive_->self = nullptr; // views still held elsewhere release nothing now
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& m : held_)
      m.clear();
  }
  if (arena_)
    arena_->unlink();
}

std::size_t shm_lending::lent() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::size_t n = 0;
  for (const auto& m : held_)
    n += m.size();
  return n;
}

arena_allocation::arena_allocation(kernels::host_allocator alloc, std::size_t min_bytes) {
  if (!alloc)
    return;
  kernels::set_host_allocator(std::move(alloc), min_bytes);
  installed_ = true;
}

arena_allocation::~arena_allocation() {
  if (installed_)
    kernels::set_host_allocator({}, 0);
}

} // namespace gradwire::transport
