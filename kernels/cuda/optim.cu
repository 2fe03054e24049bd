#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <cmath>

namespace gradwire::kernels {
namespace {

using cuda_detail::blocks_for;
using cuda_detail::threads_per_block;

__global__ void sgd_kernel(std::size_t n, float lr, float mu, float wd, bool nesterov, float* w,
                           const float* g, float* v) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float gi = g[i] + wd * w[i];
    if (mu == 0.f) {
      w[i] -= lr * gi;
      continue;
    }
    const float vi = mu * v[i] + gi;
    v[i] = vi;
    w[i] -= lr * (nesterov ? gi + mu * vi : vi);
  }
}

__global__ void adam_kernel(std::size_t n, float step_size, float b1, float b2, float eps,
                            float wd, float inv_sqrt_bc2, float* w, const float* g, float* m,
                            float* v) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float gi = g[i] + wd * w[i];
    m[i] = b1 * m[i] + (1.f - b1) * gi;
    v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
    w[i] -= step_size * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
  }
}

} // namespace

void cuda_backend::sgd_update(std::size_t n, float lr, float momentum, float weight_decay,
                              bool nesterov, float* w, const float* g, float* v) {
  const auto gw_timed = timer_.time(stream_, "sgd");
  sgd_kernel<<<blocks_for(n), threads_per_block, 0, stream_>>>(n, lr, momentum, weight_decay,
                                                               nesterov, w, g, v);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::adam_update(std::size_t n, float lr, float beta1, float beta2, float eps,
                               float weight_decay, std::int64_t step, float* w, const float* g,
                               float* m, float* v) {
  const auto gw_timed = timer_.time(stream_, "adam");
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  adam_kernel<<<blocks_for(n), threads_per_block, 0, stream_>>>(
    n, static_cast<float>(lr / bc1), beta1, beta2, eps, weight_decay,
    static_cast<float>(1.0 / std::sqrt(bc2)), w, g, m, v);
  GW_CUDA_LAUNCHED();
}

} // namespace gradwire::kernels
