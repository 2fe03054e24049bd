#include "transport/buffer_pool.hpp"

#include "kernels/huge_pages.hpp"

#include <cstdlib>
#include <new>

namespace gradwire::transport {

buffer_pool::~buffer_pool() {
  for (auto& bin : free_)
    for (void* p : bin)
      std::free(p);
}

kernels::tensor buffer_pool::get(std::size_t floats) {
  int bin = 6; // 64 bytes at least
  while ((std::size_t{1} << bin) < floats * sizeof(float))
    ++bin;
  const std::size_t bytes = std::size_t{1} << bin;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (static_cast<std::size_t>(bin) < free_.size() && !free_[static_cast<std::size_t>(bin)].empty()) {
      p = free_[static_cast<std::size_t>(bin)].back();
      free_[static_cast<std::size_t>(bin)].pop_back();
    }
  }
  if (!p) {
    p = kernels::alloc_host(bytes, min_huge_);
    if (!p)
      throw std::bad_alloc();
  }
  std::weak_ptr<buffer_pool> pool = weak_from_this();
  auto st = std::make_shared<kernels::storage>(p, bytes, kernels::device::cpu(), [pool, bin](void* q) {
    if (auto alive = pool.lock())
      alive->put(bin, q);
    else
      std::free(q);
  });
  return kernels::tensor(st, 0, {static_cast<std::int64_t>(floats)}, kernels::dtype::f32);
}

void buffer_pool::put(int bin, void* p) {
  std::lock_guard<std::mutex> lk(mu_);
  if (free_.size() <= static_cast<std::size_t>(bin))
    free_.resize(static_cast<std::size_t>(bin) + 1);
  auto& b = free_[static_cast<std::size_t>(bin)];
  if (b.size() < keep_)
    b.push_back(p);
  else
    std::free(p);
}

std::size_t buffer_pool::free_count() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::size_t n = 0;
  for (const auto& b : free_)
    n += b.size();
  return n;
}

} // namespace gradwire::transport
