#pragma once
/// @file mma_tile.cuh
/// Warp-wide 16 x 16 x 16 bf16 matrix products on the Tensor Cores, as the
/// device-code headers use them: fragments of A (row-major), of B (row- or
/// column-major) and fp32 accumulators, loaded from and stored to shared
/// memory. Under nvcc these are CUDA's wmma; on the host,
/// tests/kernels/host_sim.hpp gives the same names an emulation (each
/// thread holds the whole tile), so the CPU suite runs the kernels too.
///
/// A warp calls each of these together. Between a store and another lane's
/// read of what was stored, and between a lane's write and a load of it,
/// comes gw_syncwarp().

#include "kernels/cuda/device_code.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <mma.h>

namespace gradwire::kernels::cuda_kernels {
namespace {

using gw_bf16 = __nv_bfloat16;
__device__ inline gw_bf16 gw_to_bf16(float x) { return __float2bfloat16_rn(x); }
__device__ inline float gw_from_bf16(gw_bf16 x) { return __bfloat162float(x); }
__device__ inline void gw_syncwarp() { __syncwarp(); }

namespace mma {
namespace w = nvcuda::wmma;
using frag_a = w::fragment<w::matrix_a, 16, 16, 16, gw_bf16, w::row_major>;
using frag_b_row = w::fragment<w::matrix_b, 16, 16, 16, gw_bf16, w::row_major>;
using frag_b_col = w::fragment<w::matrix_b, 16, 16, 16, gw_bf16, w::col_major>;
using frag_acc = w::fragment<w::accumulator, 16, 16, 16, float>;

template <typename F>
__device__ inline void load(F& f, const gw_bf16* p, int ld) { w::load_matrix_sync(f, p, static_cast<unsigned>(ld)); }
__device__ inline void load(frag_acc& f, const float* p, int ld) {
  w::load_matrix_sync(f, p, static_cast<unsigned>(ld), w::mem_row_major);
}
__device__ inline void store(float* p, const frag_acc& f, int ld) {
  w::store_matrix_sync(p, f, static_cast<unsigned>(ld), w::mem_row_major);
}
__device__ inline void zero(frag_acc& f) { w::fill_fragment(f, 0.f); }
template <typename B>
__device__ inline void mma(frag_acc& d, const frag_a& a, const B& b) { w::mma_sync(d, a, b, d); }
} // namespace mma

} // namespace
} // namespace gradwire::kernels::cuda_kernels
#endif
