#include "kernels/cpu/cpu_backend.hpp"

#include "kernels/error.hpp"
#include "kernels/huge_pages.hpp"

#include <atomic>
#include <cblas.h>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace gradwire::kernels {

cpu_backend::cpu_backend() {
  // Parallelism comes from gradwire's own threads (micro-batch replicas, one
  // worker per actor); OpenBLAS's pool would only fight them for cores.
  openblas_set_num_threads(1);
}

namespace {
std::mutex host_alloc_mu;
host_allocator host_alloc;
/// Smallest size host_alloc takes (max: none set), read without the lock
/// so that allocations below it never take it.
std::atomic<std::size_t> host_alloc_min{SIZE_MAX};
} // namespace

void set_host_allocator(host_allocator alloc, std::size_t min_bytes) {
  std::lock_guard<std::mutex> lk(host_alloc_mu);
  host_alloc_min = alloc ? min_bytes : SIZE_MAX;
  host_alloc = std::move(alloc);
}

std::shared_ptr<storage> cpu_backend::allocate(std::size_t bytes) {
  // Large tensors on huge pages, each at its own offset below 4 KiB (see
  // huge_pages.hpp: tensors read together must not alias).
  static std::atomic<unsigned> next_color{0};
  const std::size_t color = bytes >= huge_page_bytes ? (next_color++ % 13) * 320 : 0;
  host_allocator alloc;
  if (bytes >= host_alloc_min.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lk(host_alloc_mu);
    if (host_alloc && bytes >= host_alloc_min.load(std::memory_order_relaxed))
      alloc = host_alloc;
  }
  if (alloc)
    if (auto st = alloc(bytes, color))
      return st;
  char* base = bytes ? static_cast<char*>(alloc_host(bytes + color, huge_page_bytes)) : nullptr;
  check(bytes == 0 || base != nullptr, "out of host memory allocating " + std::to_string(bytes) + " bytes");
  return std::make_shared<storage>(base ? base + color : nullptr, bytes, device::cpu(), [base](void*) { std::free(base); });
}

void cpu_backend::copy_bytes(void* dst, device dst_dev, const void* src, device src_dev,
                             std::size_t bytes) {
  check(dst_dev.is_cpu() && src_dev.is_cpu(), "cpu backend cannot copy device memory");
  if (bytes)
    std::memcpy(dst, src, bytes);
}

void cpu_backend::fill(float* x, std::size_t n, float value) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = value;
}

} // namespace gradwire::kernels
