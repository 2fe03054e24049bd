#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

namespace gradwire::kernels {
namespace {

using cuda_detail::blocks_for;
using cuda_detail::threads_per_block;

// One thread per output element; argmax is the index within the (n, c) plane,
// as in the CPU reference.
// The geometry's out_h()/out_w() are host functions: extents come as arguments.
__global__ void maxpool_fwd(pool_geom g, int oh, int ow, const float* x, float* y,
                            std::int32_t* argmax) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * oh * ow;
  for (std::size_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
    const std::size_t plane = o / (oh * ow);
    const int rem = static_cast<int>(o % (oh * ow));
    const int oy = rem / ow, ox = rem % ow;
    const float* in = x + plane * g.h * g.w;
    int best_i = oy * g.stride * g.w + ox * g.stride;
    float best = in[best_i];
    for (int r = 0; r < g.size; ++r)
      for (int s = 0; s < g.size; ++s) {
        const int idx = (oy * g.stride + r) * g.w + ox * g.stride + s;
        if (in[idx] > best) {
          best = in[idx];
          best_i = idx;
        }
      }
    y[o] = best;
    argmax[o] = best_i;
  }
}

// Windows may overlap (stride < size), so scatter with atomics.
__global__ void maxpool_bwd(pool_geom g, int opix, const float* dy, const std::int32_t* argmax,
                            float* dx) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * opix;
  for (std::size_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
    const std::size_t plane = o / opix;
    atomicAdd(dx + plane * g.h * g.w + argmax[o], dy[o]);
  }
}

__global__ void avg_fwd(const float* x, float* y, std::size_t planes, int hw) {
  for (std::size_t p = blockIdx.x * blockDim.x + threadIdx.x; p < planes; p += gridDim.x * blockDim.x) {
    float s = 0;
    for (int i = 0; i < hw; ++i)
      s += x[p * hw + i];
    y[p] = s / hw;
  }
}

__global__ void avg_bwd(const float* dy, float* dx, std::size_t planes, int hw) {
  const std::size_t total = planes * hw;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
    dx[i] = dy[i / hw] / hw;
}

} // namespace

void cuda_backend::maxpool_forward(const pool_geom& g, const float* x, float* y,
                                   std::int32_t* argmax) {
  const auto gw_timed = timer_.time(stream_, "maxpool fwd");
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.out_h() * g.out_w();
  maxpool_fwd<<<blocks_for(total), threads_per_block, 0, stream_>>>(g, g.out_h(), g.out_w(), x, y,
                                                                  argmax);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::maxpool_backward(const pool_geom& g, const float* dy,
                                    const std::int32_t* argmax, float* dx) {
  const auto gw_timed = timer_.time(stream_, "maxpool bwd");
  const std::size_t in_total = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
  GW_CUDA(cudaMemsetAsync(dx, 0, in_total * sizeof(float), stream_));
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.out_h() * g.out_w();
  maxpool_bwd<<<blocks_for(total), threads_per_block, 0, stream_>>>(g, g.out_h() * g.out_w(), dy,
                                                                  argmax, dx);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::avgpool_global_forward(const float* x, float* y, int n, int c, int hw) {
  const auto gw_timed = timer_.time(stream_, "avgpool fwd");
  const std::size_t planes = static_cast<std::size_t>(n) * c;
  avg_fwd<<<blocks_for(planes), threads_per_block, 0, stream_>>>(x, y, planes, hw);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::avgpool_global_backward(const float* dy, float* dx, int n, int c, int hw) {
  const auto gw_timed = timer_.time(stream_, "avgpool bwd");
  const std::size_t planes = static_cast<std::size_t>(n) * c;
  avg_bwd<<<blocks_for(planes * hw), threads_per_block, 0, stream_>>>(dy, dx, planes, hw);
  GW_CUDA_LAUNCHED();
}

} // namespace gradwire::kernels
