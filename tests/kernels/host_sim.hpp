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
// where whole warps take whole rows and none returns early). Timing,
// occupancy and floating-point contraction are the GPU's own: the results
// agree with it to rounding, not bit for bit.

#include <algorithm>
#include <cmath>
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

inline int atomicMin(int* at, int v) {
  std::lock_guard<std::mutex> lk(gwsim::atomic_mu);
  const int old = *at;
  *at = std::min(old, v);
  return old;
}
