#include "transport/peer_budget.hpp"

namespace gradwire::transport {

struct peer_budget::ticket {
  std::shared_ptr<std::atomic<std::int64_t>[]> held;
  int src = -1; ///< set once charged; -1: not counted
  std::int64_t bytes = 0;
};

peer_budget::peer_budget(int ranks)
    : ranks_(ranks), held_(new std::atomic<std::int64_t>[static_cast<std::size_t>(ranks)]()) {}

std::int64_t peer_budget::held(int rank) const {
  return rank >= 0 && rank < ranks_ ? held_[static_cast<std::size_t>(rank)].load() : 0;
}

kernels::tensor peer_budget::track(const kernels::tensor& data, std::shared_ptr<ticket>& out) const {
  if (limit_ == 0 || !data.defined() || data.bytes() == 0)
    return data;
  out = std::make_shared<ticket>();
  out->held = held_;
  // The same memory under a storage of its own, whose last release gives
  // the bytes back: every tensor decoded from the frame is a view of it.
  const auto& orig = data.shared_storage();
  auto st = std::make_shared<kernels::storage>(orig->data(), orig->bytes(), orig->dev(),
                                               [keep = orig, t = out](void*) mutable {
                                                 if (t->src >= 0)
                                                   t->held[static_cast<std::size_t>(t->src)] -= t->bytes;
                                                 keep.reset();
                                               });
  return kernels::tensor(std::move(st), data.offset(), data.shape(), data.type());
}

std::int64_t peer_budget::charge(ticket& t, int src, std::int64_t bytes) {
  t.bytes = bytes;
  t.src = src;
  return held_[static_cast<std::size_t>(src)] += bytes;
}

} // namespace gradwire::transport
