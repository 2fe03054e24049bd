#include "kernels/cpu/cpu_backend.hpp"

#include "kernels/error.hpp"
#include "kernels/huge_pages.hpp"

#include <cblas.h>
#include <cstdlib>
#include <cstring>

namespace gradwire::kernels {

cpu_backend::cpu_backend() {
  // Parallelism comes from gradwire's own threads (micro-batch replicas, one
  // worker per actor); OpenBLAS's pool would only fight them for cores.
  openblas_set_num_threads(1);
}

std::shared_ptr<storage> cpu_backend::allocate(std::size_t bytes) {
  void* p = bytes ? alloc_host(bytes, huge_page_min_tensor) : nullptr;
  check(bytes == 0 || p != nullptr, "out of host memory allocating " + std::to_string(bytes) + " bytes");
  return std::make_shared<storage>(p, bytes, device::cpu(), [](void* q) { std::free(q); });
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
