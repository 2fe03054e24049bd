#pragma once
/// @file shm_lending.hpp
/// The shared-memory lending protocol between processes on one node
/// (ucx_options::shm_refs), on top of any frame link that can send small
/// control frames. It owns this process's arena (shm_arena.hpp), the
/// read-only mappings of its node-local peers' arenas, and the tensors lent
/// to each peer until that peer lets go.
///
/// Control frames (header words, no data), each with the job token's hash
/// second (a frame without it is refused before it changes any state):
///   announce  [announce_marker, token, sender, arena bytes, name length, name...]
///             after connecting, to each peer on the node;
///   mapped    [mapped_marker, token, sender]: the announcement's answer, once mapped;
///   ref       [ref_marker, token, sender, id, owner rank, offset, bytes, frame header...]
///             a frame whose data lies in an arena the receiver maps;
///   release   [release_marker, token, receiver, id]: the receiver let go of it.
///
/// Every field of a control frame is checked against what this process
/// knows (ranks, node-locality, the mapped size) before it is used.
///
/// The arena is only where tensors *can* be lent from: which tensors are
/// placed there is the host allocator's business. `allocator()` gives the
/// allocator; the code that sets up a job installs it (arena_allocation),
/// nothing here does so behind its back.

#include "kernels/tensor.hpp"
#include "transport/shm_arena.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gradwire::transport {

class shm_lending {
public:
  /// What the protocol needs from the link that carries it.
  struct carrier {
    /// Sends a control frame to `peer` (from any thread; `wake`: wake the
    /// link's progress thread for it, else it goes with the next traffic).
    std::function<void(int peer, std::vector<std::uint64_t> header, bool wake)> send_control;
    /// Hands a frame (a referenced view as its data) to the link's receiver.
    std::function<void(std::vector<std::uint64_t> header, std::size_t header_bytes, kernels::tensor data)> deliver;
    /// A frame was refused (malformed, or naming memory that is not there).
    std::function<void(const std::string& what)> reject;
    /// Whether `peer` is known to have failed.
    std::function<bool(int peer)> peer_dead;
  };

  /// Header words a ref frame puts in front of the frame's own header.
  static constexpr std::size_t ref_words = 7;

  /// `token`: the job token's hash (transport::token_hash), carried by
  /// every control frame.
  shm_lending(int rank, int size, std::size_t arena_bytes, std::size_t min_ref_bytes, std::size_t max_data_bytes,
              std::uint64_t token, carrier c);
  ~shm_lending();
  shm_lending(const shm_lending&) = delete;
  shm_lending& operator=(const shm_lending&) = delete;

  /// From the rendezvous: whether rank `r` shares this node.
  void set_local(int r, bool local);
  /// After connecting: opens this process's arena when a peer shares the
  /// node (no /dev/shm: frames are copied, as with shm_refs off).
  void open_arena();
  /// Sends the announcement to every node-local peer.
  void announce();
  bool active() const { return arena_ != nullptr; }

  /// Handles `hdr` when it is one of the protocol's control frames (true),
  /// whatever its validity; false leaves it to the link.
  bool on_frame(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes, std::size_t data_bytes);
  /// Send side: when `data` lies in shared memory that `peer` maps and
  /// `peer` has said so, rewrites (header, data) into a ref frame, holds
  /// `data` until the release, and returns true.
  bool lend(int peer, std::vector<std::uint64_t>& header, kernels::tensor& data);
  /// `peer` failed: it will release nothing and its references are void.
  void forget(int peer);
  /// `peer`'s process was replaced: nothing is lent to it (the arena it
  /// would map is unlinked by now), its old mapping is dropped, and its
  /// new arena is mapped when it announces it.
  void reset_peer(int peer);
  /// The link closes: views still held elsewhere release nothing, lent
  /// tensors are let go, the arena's name is removed.
  void close();

  /// The host allocator that places tensors of min_ref_bytes and up in this
  /// process's arena (empty without an arena); it holds the arena weakly.
  kernels::host_allocator allocator() const;
  std::size_t min_ref_bytes() const { return min_ref_bytes_; }

  std::size_t lent() const;
  std::uint64_t referenced() const { return next_ref_.load() - 1; }
  /// References lent to each rank so far, by rank: never to a rank on
  /// another host (lend refuses those whatever a peer claims).
  std::vector<std::uint64_t> referenced_by_peer() const;
  int peers_mapped() const { return peers_mapped_.load(); }

private:
  int local_peers() const;
  void on_announce(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes);
  void on_mapped(const std::vector<std::uint64_t>& hdr);
  void on_ref(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes);
  /// Where rank `owner`'s memory is mapped in this process, for a
  /// reference into it: found (`base`, `limit`, kept mapped by `keep`);
  /// deferred (the reference waits for the owner's announcement); or
  /// refused (`why`).
  struct lent_memory {
    const char* base = nullptr;
    std::size_t limit = 0;
    std::shared_ptr<void> keep;
  };
  enum class lookup { found, deferred, refused };
  lookup memory_of(int owner, const std::vector<std::uint64_t>& hdr, std::size_t header_bytes, lent_memory& out,
                   std::string& why);
  void on_release(const std::vector<std::uint64_t>& hdr, std::size_t header_bytes);
  bool locate(const kernels::tensor& t, int peer, int& owner, std::int64_t& offset);
  std::shared_ptr<shm_mapping> mapping(int r);

  int rank_, size_;
  std::size_t arena_bytes_, min_ref_bytes_, max_data_bytes_;
  std::uint64_t token_;
  carrier c_;
  std::shared_ptr<shm_arena> arena_;                  ///< this process's
  std::vector<std::shared_ptr<shm_mapping>> maps_;    ///< by rank: peers on this node
  std::vector<bool> local_;                           ///< by rank: on this node
  std::vector<std::atomic<bool>> can_ref_;            ///< by rank: it has mapped our arena
  std::vector<std::atomic<std::uint64_t>> refs_to_;   ///< by rank: references lent to it
  mutable std::mutex mu_;
  std::vector<std::unordered_map<std::uint64_t, kernels::tensor>> held_; ///< by peer: lent, not released
  std::atomic<std::uint64_t> next_ref_{1};
  std::atomic<int> peers_mapped_{0};
  /// References into a third rank's arena that arrived before its
  /// announcement (under mu_; replayed once mapped).
  std::vector<std::vector<std::pair<std::vector<std::uint64_t>, std::size_t>>> deferred_;
  std::vector<bool> unmappable_; ///< by rank: its announcement was refused (under mu_)
  /// References held back per rank before its announcement; more are refused.
  static constexpr std::size_t max_deferred = 4096;
  /// Lets a received view's release reach this object while it is open.
  struct alive_token {
    std::mutex mu;
    shm_lending* self = nullptr;
  };
  std::shared_ptr<alive_token> alive_ = std::make_shared<alive_token>();
};

/// Installs a lending allocator as the process's host allocator for as long
/// as it lives (kernels::set_host_allocator), then puts the heap back. The
/// code that sets up a job holds one; a link never installs it itself.
class arena_allocation {
public:
  arena_allocation(kernels::host_allocator alloc, std::size_t min_bytes);
  ~arena_allocation();
  arena_allocation(const arena_allocation&) = delete;
  arena_allocation& operator=(const arena_allocation&) = delete;

private:
  bool installed_ = false;
};

} // namespace gradwire::transport
