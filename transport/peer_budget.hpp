#pragma once
/// @file peer_budget.hpp
/// The bytes of each peer's received frames that no actor has handled yet,
/// against a budget per peer (transport.peer_budget): a peer that sends
/// faster than this rank's actors take its messages is cut off before it
/// fills the memory. A frame's data is counted from the moment its sender
/// is known and given back when the last view of it is released, however
/// many tensors were decoded from it and wherever they went.

#include "kernels/tensor.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace gradwire::transport {

class peer_budget {
public:
  /// Whose bytes one frame's data are, once decoding has said.
  struct ticket;

  explicit peer_budget(int ranks);

  /// Bytes per peer; 0: no budget (nothing counted). Set before frames flow.
  void set_limit(std::size_t bytes) { limit_ = bytes; }
  std::size_t limit() const { return limit_; }
  /// Bytes of `rank`'s frames held here now (0 for a rank out of range).
  std::int64_t held(int rank) const;

  /// `data` under a storage of its own whose last release gives its bytes
  /// back, and the ticket that says to whom; `data` as it is without a
  /// budget or bytes.
  kernels::tensor track(const kernels::tensor& data, std::shared_ptr<ticket>& out) const;
  /// Counts the ticket's data against `src` (a rank in range); returns the
  /// bytes `src` holds here now, which may be over the limit.
  std::int64_t charge(ticket& t, int src, std::int64_t bytes);

private:
  int ranks_;
  std::size_t limit_ = 0;
  std::shared_ptr<std::atomic<std::int64_t>[]> held_; ///< by rank; shared with the tickets
};

} // namespace gradwire::transport
