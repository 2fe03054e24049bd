#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

namespace gradwire::kernels {
namespace {

using cuda_detail::blocks_for;
using cuda_detail::threads_per_block;

#define GW_GRID_STRIDE(i, n) \
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

__global__ void relu_fwd(const float* x, float* y, std::size_t n) {
  GW_GRID_STRIDE(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void relu_bwd(const float* y, const float* dy, float* dx, std::size_t n) {
  GW_GRID_STRIDE(i, n) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}
__global__ void axpy_kernel(std::size_t n, float a, const float* x, float* y) {
  GW_GRID_STRIDE(i, n) y[i] += a * x[i];
}
__global__ void scale_kernel(std::size_t n, float a, float* x) { GW_GRID_STRIDE(i, n) x[i] *= a; }
__global__ void add_kernel(std::size_t n, const float* x0, const float* x1, float* y, float s) {
  GW_GRID_STRIDE(i, n) y[i] = (x0[i] + x1[i]) * s;
}
/// Blocks of a sum: a fixed count, so each block's share of x, and the
/// order its values are added in, depend on n alone.
constexpr unsigned sum_blocks = 256;

/// Block b's partial sum of x (of x * x when squared) into part[b].
__global__ void partial_sums(const float* x, std::size_t n, bool squared, double* part) {
  __shared__ double s[threads_per_block];
  double a = 0;
  GW_GRID_STRIDE(i, n) a += squared ? static_cast<double>(x[i]) * x[i] : x[i];
  s[threadIdx.x] = a;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step)
      s[threadIdx.x] += s[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    part[blockIdx.x] = s[0];
}

/// out = the partial sums added in block order.
__global__ void add_partial_sums(const double* part, unsigned count, double* out) {
  double a = 0;
  for (unsigned b = 0; b < count; ++b)
    a += part[b];
  *out = a;
}

} // namespace

void cuda_backend::relu_forward(const float* x, float* y, std::size_t n) {
  const auto gw_timed = timer_.time(stream_, "relu fwd");
  relu_fwd<<<blocks_for(n), threads_per_block, 0, stream_>>>(x, y, n);
  GW_CUDA_LAUNCHED();
}
void cuda_backend::relu_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  const auto gw_timed = timer_.time(stream_, "relu bwd");
  relu_bwd<<<blocks_for(n), threads_per_block, 0, stream_>>>(y, dy, dx, n);
  GW_CUDA_LAUNCHED();
}
void cuda_backend::axpy(std::size_t n, float a, const float* x, float* y) {
  const auto gw_timed = timer_.time(stream_, "axpy");
  axpy_kernel<<<blocks_for(n), threads_per_block, 0, stream_>>>(n, a, x, y);
  GW_CUDA_LAUNCHED();
}
void cuda_backend::scale(std::size_t n, float a, float* x) {
  const auto gw_timed = timer_.time(stream_, "scale");
  scale_kernel<<<blocks_for(n), threads_per_block, 0, stream_>>>(n, a, x);
  GW_CUDA_LAUNCHED();
}
void cuda_backend::add(std::size_t n, const float* x0, const float* x1, float* y, float s) {
  const auto gw_timed = timer_.time(stream_, "add");
  add_kernel<<<blocks_for(n), threads_per_block, 0, stream_>>>(n, x0, x1, y, s);
  GW_CUDA_LAUNCHED();
}
double cuda_backend::reduce(const float* x, std::size_t n, bool squared) {
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, squared ? "sum of squares" : "sum");
  auto* part = static_cast<double*>(scratch(sizeof(double) * (sum_blocks + 1)));
  partial_sums<<<sum_blocks, threads_per_block, 0, stream_>>>(x, n, squared, part);
  GW_CUDA_LAUNCHED();
  add_partial_sums<<<1, 1, 0, stream_>>>(part, sum_blocks, part + sum_blocks);
  GW_CUDA_LAUNCHED();
  double host = 0;
  GW_CUDA(cudaMemcpyAsync(&host, part + sum_blocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  GW_CUDA(cudaStreamSynchronize(stream_));
  return host;
}

double cuda_backend::sum(const float* x, std::size_t n) { return reduce(x, n, false); }

double cuda_backend::sum_squares(const float* x, std::size_t n) { return reduce(x, n, true); }

} // namespace gradwire::kernels
