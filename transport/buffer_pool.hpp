#pragma once
/// @file buffer_pool.hpp
/// Receive buffers for data frames: 64-byte aligned (from 512 KiB on huge
/// pages: kernels::alloc_host), handed out as tensors
/// whose storage returns to the pool when the last view goes away (so a
/// received gradient chunk can travel on to actors without a copy, and the
/// steady state of a training loop allocates nothing). Buffers are binned
/// by power-of-two size; each bin keeps at most `keep` free buffers.

#include "kernels/huge_pages.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace gradwire::transport {

class buffer_pool : public std::enable_shared_from_this<buffer_pool> {
public:
  /// `min_huge`: buffers from this size on go on huge pages (a whole 2 MiB
  /// page from 512 KiB up by default; SIZE_MAX: never).
  explicit buffer_pool(std::size_t keep = 64, std::size_t min_huge = kernels::huge_page_min_buffer)
      : keep_(keep), min_huge_(min_huge) {}
  ~buffer_pool();
  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;

  /// A float tensor of `floats` elements (uninitialised).
  kernels::tensor get(std::size_t floats);
  /// Buffers currently free in the pool (for tests).
  std::size_t free_count() const;

private:
  void put(int bin, void* p);
  std::size_t keep_, min_huge_;
  mutable std::mutex mu_;
  std::vector<std::vector<void*>> free_; ///< per bin
};

} // namespace gradwire::transport
