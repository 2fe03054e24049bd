#include "transport/shm_collective.hpp"

#include "kernels/error.hpp"
#include "transport/comm_algorithms.hpp"
#include "transport/shm_arena.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GRADWIRE_PAUSE() _mm_pause()
#else
#define GRADWIRE_PAUSE() ((void)0)
#endif

namespace gradwire::transport {

using across_fn = shm_allreduce::across_fn;

namespace {

constexpr std::uint64_t segment_magic = 0x4d48534c4c4f4347ull; // "GCOLLSHM"
constexpr std::size_t header_bytes = 4096;

/// The head of a rank's segment. Only its owner writes it; the counters
/// are written with release and read with acquire, so a peer that sees
/// `posted` (or `reduced`) at g sees the floats written before it.
struct header {
  std::uint64_t magic;
  std::uint64_t rank, size, half_floats;
  // `count` shares `posted`'s cache line: a peer that sees one has the other.
  alignas(64) std::uint64_t posted;   ///< the last piece whose slices are in place
  std::uint64_t count[2];             ///< the allreduce's float count, per half
  alignas(64) std::uint64_t reduced;  ///< the last piece whose own segment's sum is in place
  alignas(64) std::uint64_t aborted;  ///< nonzero: this rank failed and will post nothing more
};
static_assert(sizeof(header) <= header_bytes);

constexpr std::size_t segment_bytes = header_bytes + 2 * shm_allreduce::half_floats * sizeof(float);

std::uint64_t load(const std::uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
using comm_algorithms::copy;
void store(std::uint64_t* p, std::uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/// n floats cut in p segments as the ring cuts them (lengths differ by one
/// at most), each moved in slices of q floats, one per piece: a segment's
/// slice of every owner fits a half.
struct cut {
  std::size_t n, p, q, pieces;
  cut(std::size_t n_, std::size_t p_) : n(n_), p(p_), q((shm_allreduce::half_floats / p_) & ~std::size_t{15}) {
    const std::size_t longest = begin(1) + (n % p != 0 ? 1 : 0);
    pieces = (longest + q - 1) / q;
  }
  std::size_t begin(std::size_t s) const { return n * s / p; }
  /// Slice k of segment s: [a, b) of the buffer (empty past its end).
  void slice(std::size_t s, std::size_t k, std::size_t& a, std::size_t& b) const {
    a = std::min(begin(s) + k * q, begin(s + 1));
    b = std::min(a + q, begin(s + 1));
  }
};

} // namespace

struct shm_allreduce::impl {
  /// This rank's index in the group and the group's size: the algorithm's
  /// ranks. The segment's header carries the communicator's own.
  int rank = 0, size = 0, timeout_ms = 0;
  int comm_rank = 0, comm_size = 0;
  std::vector<int> members; ///< the group's communicator ranks, ascending
  int owners = 0;            ///< the first `owners` ranks of the group own a segment each
  bool gather_small = true;  ///< below gather_below_bytes, gathered() (owners == size then)
  bool spin_yield = false;
  std::shared_ptr<shm_arena> mine;
  std::vector<std::unique_ptr<shm_mapping>> peers; ///< by group index; this rank's is null
  std::uint64_t piece = 0;
  bool broken = false;
  std::atomic<bool> aborted{false}; ///< abort(): the next look in a wait fails

  header* own() { return reinterpret_cast<header*>(mine->base()); }
  float* own_half(int h) {
    return reinterpret_cast<float*>(mine->base() + header_bytes) + static_cast<std::size_t>(h) * half_floats;
  }
  const header* hdr(int q) const { return reinterpret_cast<const header*>(peers[static_cast<std::size_t>(q)]->base()); }
  const float* half(int q, int h) const {
    return reinterpret_cast<const float*>(peers[static_cast<std::size_t>(q)]->base() + header_bytes) +
           static_cast<std::size_t>(h) * half_floats;
  }
  [[noreturn]] void fail(const std::string& why) {
    broken = true;
    store(&own()->aborted, 1); // the peers learn now, not after their timeout
    throw error("allreduce over shared memory (rank " + std::to_string(comm_rank) + "): " + why);
  }
  /// Group index q's rank in the communicator, for messages.
  std::string who(int q) const { return "rank " + std::to_string(members[static_cast<std::size_t>(q)]); }

  /// Waits until every peer's counter `field` reaches g.
  void wait_all(std::uint64_t header::*field, std::uint64_t g, const char* what) {
    for (int q = 0; q < size; ++q) {
      if (q == rank)
        continue;
      const std::uint64_t* f = &(hdr(q)->*field);
      if (load(f) >= g)
        continue;
      const auto start = std::chrono::steady_clock::now();
      for (unsigned spins = 1; load(f) < g; ++spins) {
        // Ranks that share CPUs give theirs up at once; others poll a
        // while first (a sleeping vCPU takes long to wake).
        if (spin_yield || spins > 2048)
          ::sched_yield();
        else
          GRADWIRE_PAUSE();
        if ((spins & 255u) != 0)
          continue;
        if (load(&hdr(q)->aborted) != 0)
          fail(who(q) + " gave up (its allreduce failed) at piece " + std::to_string(g));
        if (aborted.load(std::memory_order_relaxed))
          fail("the job lost a rank: the collective is given up");
        // (Looked at again after the clock: a thread held off the CPU past
        // the timeout must not blame a rank that wrote meanwhile.)
        if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms) && load(f) < g)
          fail("no word from " + who(q) + " for " + std::to_string(timeout_ms) + " ms (waiting for its " +
               what + " slices of piece " + std::to_string(g) + ")");
      }
    }
  }

  /// Raises `posted` to g, waits until every peer has, and checks that
  /// each called with n floats.
  void post(std::uint64_t g, int h, std::size_t n) {
    store(&own()->posted, g);
    wait_all(&header::posted, g, "posted");
    for (int q = 0; q < size; ++q)
      if (q != rank && hdr(q)->count[h] != n)
        fail(who(q) + " called with " + std::to_string(hdr(q)->count[h]) +
             " floats, this rank with " + std::to_string(n) + " (do all ranks call with the same size?)");
  }

  /// Small buffers, one wait: every rank posts its whole buffer and adds
  /// every segment itself, each in the ring's order (segment s from rank
  /// s on), from the halves.
  void gathered(float* data, std::size_t n, const across_fn& across) {
    const std::uint64_t g = ++piece;
    const int h = static_cast<int>(g & 1);
    own()->count[h] = n;
    copy(own_half(h), data, n);
    post(g, h, n);
    const auto p = static_cast<std::size_t>(size);
    auto from = [&](std::size_t q) { return q == static_cast<std::size_t>(rank) ? own_half(h) : half(static_cast<int>(q), h); };
    for (std::size_t s = 0; s < p; ++s) {
      const std::size_t a = n * s / p, len = n * (s + 1) / p - a;
      if (s != static_cast<std::size_t>(rank))
        copy(data + a, from(s) + a, len);
      for (std::size_t j = 1; j < p; ++j)
        comm_algorithms::add(data + a, from((s + j) % p) + a, len);
    }
    if (across) // every rank of the group holds the same sums: each adds the other hosts' in its own group
      across(data, n);
  }

  /// The three steps of the file's head, piece by piece. Ranks past
  /// `owners` own no segment: they post their slices and read the sums.
  void scattered(float* data, std::size_t n, const across_fn& across) {
    const auto p = static_cast<std::size_t>(size);
    const auto r = static_cast<std::size_t>(rank);
    const auto segments = static_cast<std::size_t>(owners);
    const cut c(n, segments);
    const std::size_t q = c.q;
    for (std::size_t k = 0; k < c.pieces; ++k) {
      const std::uint64_t g = ++piece;
      const int h = static_cast<int>(g & 1);
      float* out = own_half(h);
      own()->count[h] = n;
      std::size_t a = 0, b = 0;
      for (std::size_t s = 0; s < segments; ++s) { // 1. this rank's part of the others' segments
        c.slice(s, k, a, b);
        if (s != r && b > a)
          copy(out + s * q, data + a, b - a);
      }
      post(g, h, n);
      if (r < segments) { // 2. this rank's segment: the ring's order, block by block while it is in cache
        c.slice(r, k, a, b);
        constexpr std::size_t block = 4096;
        for (std::size_t at = a; at < b; at += block) {
          const std::size_t len = std::min(block, b - at);
          for (std::size_t j = 1; j < p; ++j)
            comm_algorithms::add(data + at, half(static_cast<int>((r + j) % p), h) + r * q + (at - a), len);
          if (!across)
            copy(out + r * q + (at - a), data + at, len);
        }
        if (across && b > a) { // the other hosts' sums of this slice, then published
          across(data + a, b - a);
          copy(out + r * q, data + a, b - a);
        }
      }
      store(&own()->reduced, g);
      wait_all(&header::reduced, g, "summed");
      for (std::size_t s = 0; s < segments; ++s) { // 3. every other segment's sum, from its owner
        c.slice(s, k, a, b);
        if (s != r && b > a)
          copy(data + a, half(static_cast<int>(s), h) + s * q, b - a);
      }
    }
  }
};

shm_allreduce::shm_allreduce(int rank, int size, int timeout_ms, bool spin_yield) : p_(std::make_unique<impl>()) {
  check(size >= 2 && size <= max_ranks && rank >= 0 && rank < size && timeout_ms > 0,
        "allreduce over shared memory: rank " + std::to_string(rank) + " of " + std::to_string(size));
  p_->rank = p_->comm_rank = rank;
  p_->size = p_->comm_size = size;
  p_->timeout_ms = timeout_ms;
  p_->spin_yield = spin_yield;
  p_->mine = std::make_shared<shm_arena>(arena_name(rank), segment_bytes, true);
  header* h = p_->own();
  std::memset(h, 0, sizeof(header));
  h->rank = static_cast<std::uint64_t>(rank);
  h->size = static_cast<std::uint64_t>(size);
  h->half_floats = half_floats;
  store(&h->magic, segment_magic);
}

shm_allreduce::~shm_allreduce() = default;

const std::string& shm_allreduce::name() const { return p_->mine->name(); }

void shm_allreduce::connect(const std::vector<std::string>& names) {
  std::vector<int> all(names.size());
  for (std::size_t r = 0; r < all.size(); ++r)
    all[r] = static_cast<int>(r);
  connect(names, all, static_cast<int>(all.size()), true);
}

void shm_allreduce::each_slice(std::size_t n, int owners, int s, const std::function<void(std::size_t, std::size_t)>& fn) {
  check(owners >= 1 && owners <= max_ranks && s >= 0 && s < owners,
        "allreduce over shared memory: segment " + std::to_string(s) + " of " + std::to_string(owners));
  if (n == 0)
    return;
  const cut c(n, static_cast<std::size_t>(owners));
  for (std::size_t k = 0; k < c.pieces; ++k) {
    std::size_t a = 0, b = 0;
    c.slice(static_cast<std::size_t>(s), k, a, b);
    if (b > a)
      fn(a, b);
  }
}

std::size_t shm_allreduce::pieces(std::size_t n, int owners) {
  check(owners >= 1 && owners <= max_ranks, "allreduce over shared memory: " + std::to_string(owners) + " segments");
  return n == 0 ? 0 : cut(n, static_cast<std::size_t>(owners)).pieces;
}

void shm_allreduce::connect(const std::vector<std::string>& names, const std::vector<int>& members, int owners,
                            bool gather_small) {
  impl& m = *p_;
  check(static_cast<int>(names.size()) == m.comm_size, "allreduce over shared memory: one segment name per rank expected");
  const auto me = std::find(members.begin(), members.end(), m.comm_rank);
  check(members.size() >= 2 && std::is_sorted(members.begin(), members.end()) &&
          std::adjacent_find(members.begin(), members.end()) == members.end() && me != members.end() &&
          members.front() >= 0 && members.back() < m.comm_size,
        "allreduce over shared memory: the group must be 2 or more distinct ranks, ascending, this rank among them");
  check(owners >= 1 && static_cast<std::size_t>(owners) <= members.size() &&
            (!gather_small || static_cast<std::size_t>(owners) == members.size()),
        "allreduce over shared memory: " + std::to_string(owners) + " segment owners among " +
            std::to_string(members.size()) + " ranks" + (gather_small ? ", gathering small buffers" : ""));
  m.members = members;
  m.rank = static_cast<int>(me - members.begin());
  m.size = static_cast<int>(members.size());
  m.owners = owners;
  m.gather_small = gather_small;
  m.peers.clear();
  m.peers.resize(members.size());
  for (int q = 0; q < m.size; ++q) {
    if (q == m.rank)
      continue;
    const int r = members[static_cast<std::size_t>(q)];
    const auto& name = names[static_cast<std::size_t>(r)];
    const std::string who = "allreduce over shared memory: rank " + std::to_string(r) + "'s segment";
    check(is_arena_name(name), who + " has no gradwire segment name");
    m.peers[static_cast<std::size_t>(q)] = std::make_unique<shm_mapping>(name, segment_bytes);
    const header* h = m.hdr(q);
    check(load(&h->magic) == segment_magic, who + " " + name + " is not a collective segment");
    check(h->rank == static_cast<std::uint64_t>(r) && h->size == static_cast<std::uint64_t>(m.comm_size) &&
              h->half_floats == half_floats,
          who + " says rank " + std::to_string(h->rank) + " of " + std::to_string(h->size) + ", halves of " +
              std::to_string(h->half_floats) + " floats; rank " + std::to_string(r) + " of " +
              std::to_string(m.comm_size) + ", " + std::to_string(half_floats) + " expected");
  }
}

void shm_allreduce::unlink() { p_->mine->unlink(); }

void shm_allreduce::abort() { p_->aborted.store(true, std::memory_order_relaxed); }

void shm_allreduce::allreduce(float* data, std::size_t n, const across_fn& across) {
  impl& m = *p_;
  if (m.broken || m.peers.size() != static_cast<std::size_t>(m.size) || m.peers.size() < 2) // (no message built on the hot path)
    throw error("allreduce over shared memory (rank " + std::to_string(m.comm_rank) + "): " +
                (m.broken ? "it failed earlier" : "not connected"));
  if (n == 0)
    return;
  if (m.gather_small && n * sizeof(float) < gather_below_bytes)
    m.gathered(data, n, across);
  else
    m.scattered(data, n, across);
}

} // namespace gradwire::transport
