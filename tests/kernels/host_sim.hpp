#pragma once
// Runs CUDA kernel code on the host, so the CPU suite checks the logic of
// the GPU kernels (indices, tiles, masks, barriers, reductions) on every
// machine. Include it before a kernels/cuda/*_kernels.cuh header.
//
// A block is one std::thread per CUDA thread, blocks one after another.
// `__shared__` arrays are static: one copy, which the block's threads share
// and the next block reuses. `__syncthreads()` is a barrier of the block's
// threads, and a warp shuffle goes through a slot per thread between two
// such barriers, so every thread of the block must shuffle together (true
// where whole warps take whole rows and none returns early). The warp
// tiles of kernels/cuda/mma_tile.cuh are emulated: each thread holds a
// whole 16 x 16 tile, multiplies it in fp32 in order of k, and a warp's
// lane 0 stores it; gw_syncwarp() is then a barrier of the whole block, so
// every warp of a block must reach it together, as with shuffles. Timing,
// occupancy and floating-point contraction are the GPU's own: the results
// agree with it to rounding, not bit for bit.

#include "kernels/bf16.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

namespace gwsim {

/// A reusable barrier of `n` threads.
class barrier {
public:
  explicit barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lk(mu_);
    const long gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return generation_ != gen; });
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  long generation_ = 0;
};

inline thread_local dim3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;
inline barrier* block_barrier = nullptr;
inline std::vector<double> shuffle_slots;
inline std::mutex atomic_mu;

/// Runs `kernel()` as a grid of `grid` blocks of `threads` threads.
template <typename F>
void launch(dim3 grid, int threads, F kernel) {
  grid_dim = grid;
  block_dim = dim3(static_cast<unsigned>(threads));
  shuffle_slots.assign(static_cast<std::size_t>(threads), 0.0);
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      barrier b(threads);
      block_barrier = &b;
      std::vector<std::thread> block;
      for (int t = 0; t < threads; ++t)
        block.emplace_back([&, t] {
          thread_idx = dim3(static_cast<unsigned>(t));
          block_idx = dim3(bx, by);
          kernel();
        });
      for (auto& t : block)
        t.join();
    }
}

} // namespace gwsim

#define __global__
#define __device__
#define __shared__ static
#define __align__(n) alignas(n)
#define threadIdx (gwsim::thread_idx)
#define blockIdx (gwsim::block_idx)
#define blockDim (gwsim::block_dim)
#define gridDim (gwsim::grid_dim)
#define __syncthreads() (gwsim::block_barrier->arrive_and_wait())

using std::max;
using std::min;

inline double __shfl_xor_sync(unsigned, double v, int lane_mask) {
  gwsim::shuffle_slots[threadIdx.x] = v;
  __syncthreads();
  const double other = gwsim::shuffle_slots[threadIdx.x ^ static_cast<unsigned>(lane_mask)];
  __syncthreads();
  return other;
}

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return static_cast<float>(__shfl_xor_sync(mask, static_cast<double>(v), lane_mask));
}

inline int atomicMin(int* at, int v) {
  std::lock_guard<std::mutex> lk(gwsim::atomic_mu);
  const int old = *at;
  *at = std::min(old, v);
  return old;
}

// The warp tiles of kernels/cuda/mma_tile.cuh.
namespace gradwire::kernels::cuda_kernels {

struct gw_bf16 {
  std::uint16_t bits = 0;
};
inline gw_bf16 gw_to_bf16(float x) { return {to_bf16(x)}; }
inline float gw_from_bf16(gw_bf16 x) { return from_bf16(x.bits); }
inline void gw_syncwarp() { __syncthreads(); }

namespace mma {
/// A whole 16 x 16 tile, element (r, c) at v[16 r + c], in every thread.
struct tile {
  float v[256];
};
struct frag_a : tile {};
struct frag_b_row : tile {};
struct frag_b_col : tile {};
struct frag_acc : tile {};

inline void load(frag_a& f, const gw_bf16* p, int ld) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.v[16 * r + c] = gw_from_bf16(p[r * ld + c]);
}
inline void load(frag_b_row& f, const gw_bf16* p, int ld) {
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n)
      f.v[16 * k + n] = gw_from_bf16(p[k * ld + n]);
}
inline void load(frag_b_col& f, const gw_bf16* p, int ld) {
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n)
      f.v[16 * k + n] = gw_from_bf16(p[n * ld + k]);
}
inline void load(frag_acc& f, const float* p, int ld) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.v[16 * r + c] = p[r * ld + c];
}
inline void store(float* p, const frag_acc& f, int ld) {
  if (threadIdx.x % 32 != 0)
    return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      p[r * ld + c] = f.v[16 * r + c];
}
inline void zero(frag_acc& f) { std::fill(std::begin(f.v), std::end(f.v), 0.f); }
template <typename B>
void mma(frag_acc& d, const frag_a& a, const B& b) {
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = d.v[16 * r + n];
      for (int k = 0; k < 16; ++k)
        s += a.v[16 * r + k] * b.v[16 * k + n];
      d.v[16 * r + n] = s;
    }
}
} // namespace mma

} // namespace gradwire::kernels::cuda_kernels
