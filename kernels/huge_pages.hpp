#pragma once
/// @file huge_pages.hpp
/// Host memory on transparent huge pages (Debian's kernels default THP to
/// "madvise"): a buffer from a threshold up is 2 MiB-aligned, rounded up to
/// whole 2 MiB pages and advised as huge before first touch. Falls back
/// silently to ordinary pages where the kernel refuses.
///
/// - Tensors from 2 MiB (cpu_backend::allocate) and transport receive
///   buffers from 512 KiB (transport::buffer_pool): a shared-memory copy
///   between processes (CMA) pins and walks the source and destination
///   page by page, 512 times fewer pages on huge ones. 2-process allreduce
///   busbw, medians of 4 paired runs: 1 MiB +8%, 4 MiB +10%, 16 MiB +6%,
///   64 MiB +4%. A receive buffer of 512 KiB to 2 MiB takes a whole huge
///   page (at most 4x its size; a ring holds a few at a time).
///
/// Buffers that start on a 2 MiB boundary all share their address bits
/// below 4 KiB, so an update streaming through weights, gradients and
/// momentum at once (SGD) aliases in the L1 cache and the store buffer,
/// and the MLP's SGD step grew to several times its share of a training
/// step (bench/RESULTS.md, "Figures behind the code"). cpu_backend::allocate therefore
/// starts each large tensor at a different offset (a multiple of 320
/// bytes), and tensors below 2 MiB stay on ordinary pages.

#include <cstddef>
#include <cstdlib>

#include <sys/mman.h>

namespace gradwire::kernels {

constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
/// Transport receive buffers of at least this many bytes use huge pages.
constexpr std::size_t huge_page_min_buffer = std::size_t{512} << 10;

/// `bytes` of host memory, 64-byte aligned; from `min_huge` bytes up on
/// huge pages as above. Null when out of memory. Release with std::free.
inline void* alloc_host(std::size_t bytes, std::size_t min_huge) {
  if (bytes < min_huge)
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  const std::size_t rounded = (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  void* p = std::aligned_alloc(huge_page_bytes, rounded);
  if (p != nullptr)
    ::madvise(p, rounded, MADV_HUGEPAGE); // advice only: ignored where THP is off
  return p;
}

} // namespace gradwire::kernels
