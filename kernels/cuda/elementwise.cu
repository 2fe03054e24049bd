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
__global__ void sum_kernel(const float* x, std::size_t n, double* out) {
  __shared__ double part[threads_per_block];
  double s = 0;
  GW_GRID_STRIDE(i, n) s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step)
      part[threadIdx.x] += part[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicAdd(out, part[0]);
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
double cuda_backend::sum(const float* x, std::size_t n) {
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "sum");
  auto* out = static_cast<double*>(scratch(sizeof(double)));
  GW_CUDA(cudaMemsetAsync(out, 0, sizeof(double), stream_));
  sum_kernel<<<blocks_for(n), threads_per_block, 0, stream_>>>(x, n, out);
  GW_CUDA_LAUNCHED();
  double host = 0;
  GW_CUDA(cudaMemcpyAsync(&host, out, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  GW_CUDA(cudaStreamSynchronize(stream_));
  return host;
}

} // namespace gradwire::kernels
