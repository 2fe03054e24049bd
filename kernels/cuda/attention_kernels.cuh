#pragma once
/// @file attention_kernels.cuh
/// The device code of causal attention (attention.cu launches it). Plain
/// CUDA C++ that calls no runtime, so tests/kernels/host_sim.hpp can also
/// run it on the host, a thread per CUDA thread, and the CPU suite checks
/// it (tests/kernels/test_cuda_on_host.cpp).
///
/// Causal self-attention in fp32, FlashAttention's way, as the CPU reference
/// defines it (kernels/cpu/attention.cpp): the time x time scores are never
/// stored. A block takes `rows` consecutive positions of one (sequence,
/// head), a thread one position, and walks the other side's positions in
/// tiles staged in shared memory, where every thread reads the same row at
/// once (a broadcast).
/// - forward: a thread is a query; an online softmax over the key tiles
///   keeps its running maximum, sum and output in registers.
/// - backward (FlashAttention-2's recomputation from the log-sum-exp):
///   dq by queries over key tiles, dk and dv by keys over query tiles. Two
///   kernels, each writing only its own rows, so there are no atomics and a
///   run repeats itself bit for bit.
/// Head sizes up to 128 run; the head size is a template bound (16, 32, 64
/// or 128, the next at or above it), the loops stop at the real one.
/// Dropout of the probabilities draws each one's mask where it is used
/// (kernels/dropout_mask.hpp): forward scales p before it meets v and keeps
/// the row sums whole; backward masks dp and takes the masked p for dv.

#include "kernels/cuda/device_code.cuh"
#include "kernels/dropout_mask.hpp"

namespace gradwire::kernels::cuda_kernels {
namespace { // each file that includes these has its own copy

/// Positions a block takes, and the tile of the other side it stages.
template <int HD>
struct tile_of {
  static constexpr int rows = HD <= 64 ? 64 : 32;
};

struct geometry {
  int batch, time, heads, d, hd;
  float scale;
  dropout_mask drop{};
  std::uint64_t first_head_row = 0; ///< the call's first sample in the step's batch x heads
  /// Block (x, y): positions [x * rows, ...) of sequence y / heads, head y % heads.
  __device__ std::size_t row0() const { return static_cast<std::size_t>(blockIdx.y / heads) * time; }
  __device__ int head() const { return blockIdx.y % heads; }
  __device__ std::size_t qkv(int t, int part) const {
    return (row0() + t) * 3 * d + static_cast<std::size_t>(part) * d + static_cast<std::size_t>(head()) * hd;
  }
  __device__ std::size_t y(int t) const { return (row0() + t) * d + static_cast<std::size_t>(head()) * hd; }
  __device__ std::size_t lse(int t) const { return static_cast<std::size_t>(blockIdx.y) * time + t; }
  /// The dropout scale of query i's probability of key j: 1 without dropout.
  __device__ float drop_scale(int i, int j) const {
    return drop.on ? drop.scale(attention_index(first_head_row + blockIdx.y, time, i, j)) : 1.f;
  }
};

/// Copies rows [from, from + n) of part `part` (or of y-shaped `src` when
/// part < 0) into smem rows of HD floats; rows past the end are zero.
template <int HD>
__device__ void stage(float* smem, const float* src, const geometry& g, int from, int n, int part) {
  for (int i = threadIdx.x; i < n * HD; i += blockDim.x) {
    const int r = i / HD, c = i % HD, t = from + r;
    float v = 0.f;
    if (t < g.time && c < g.hd)
      v = src[(part < 0 ? g.y(t) : g.qkv(t, part)) + c];
    smem[i] = v;
  }
}

/// The keys and values of positions [j0, j0 + rows) into ks and vs, once
/// every thread is done with the last tile.
template <int HD>
__device__ void stage_keys(float* ks, float* vs, const float* qkv, const geometry& g, int j0) {
  __syncthreads();
  stage<HD>(ks, qkv, g, j0, tile_of<HD>::rows, 1);
  stage<HD>(vs, qkv, g, j0, tile_of<HD>::rows, 2);
  __syncthreads();
}

template <int HD>
__global__ void attention_fwd(const float* qkv, float* y, float* lse, geometry g) {
  constexpr int R = tile_of<HD>::rows;
  __shared__ float ks[R * HD], vs[R * HD];
  const int i0 = blockIdx.x * R, i = i0 + threadIdx.x;
  const bool live = i < g.time;
  float q[HD], o[HD];
  GW_UNROLL
  for (int c = 0; c < HD; ++c) {
    q[c] = live && c < g.hd ? qkv[g.qkv(i, 0) + c] * g.scale : 0.f;
    o[c] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int last = min(g.time, i0 + R); // keys after the block's last query are masked for all
  for (int j0 = 0; j0 < last; j0 += R) {
    stage_keys<HD>(ks, vs, qkv, g, j0);
    const int valid = live ? min(R, i - j0 + 1) : 0;
    for (int c = 0; c < valid; ++c) {
      float s = 0.f;
      GW_UNROLL
      for (int e = 0; e < HD; ++e)
        s += q[e] * ks[c * HD + e];
      const float mt = fmaxf(m, s);
      const float corr = expf(m - mt), p = expf(s - mt), pz = p * g.drop_scale(i, j0 + c);
      l = l * corr + p;
      GW_UNROLL
      for (int e = 0; e < HD; ++e)
        o[e] = o[e] * corr + pz * vs[c * HD + e];
      m = mt;
    }
  }
  if (!live)
    return;
  const float inv = 1.f / l;
  GW_UNROLL
  for (int c = 0; c < HD; ++c)
    if (c < g.hd)
      y[g.y(i) + c] = o[c] * inv;
  lse[g.lse(i)] = m + logf(l);
}

/// di[t] = dy[t] . y[t] for every position of every head: one thread each.
__global__ void attention_di(const float* y, const float* dy, float* di, int rows, int heads, int d, int time) {
  const int hd = d / heads;
  for (std::size_t n = blockIdx.x * blockDim.x + threadIdx.x; n < static_cast<std::size_t>(rows) * heads;
       n += gridDim.x * blockDim.x) {
    const std::size_t row = n / heads;
    const int h = static_cast<int>(n % heads);
    const float* a = y + row * d + static_cast<std::size_t>(h) * hd;
    const float* b = dy + row * d + static_cast<std::size_t>(h) * hd;
    float s = 0.f;
    for (int c = 0; c < hd; ++c)
      s += a[c] * b[c];
    // lse's layout: [sequence, head, time]
    di[(row / time * heads + h) * time + row % time] = s;
  }
}

/// dq[i] = scale * sum over keys j <= i of p_ij (z_ij dp_ij - di_i) k_j,
/// p_ij = exp(scale q_i.k_j - lse_i), dp_ij = dy_i . v_j, z_ij the dropout
/// scale.
template <int HD>
__global__ void attention_bwd_dq(const float* qkv, const float* dy, const float* lse, const float* di, float* dqkv,
                                 geometry g) {
  constexpr int R = tile_of<HD>::rows;
  __shared__ float ks[R * HD], vs[R * HD];
  const int i0 = blockIdx.x * R, i = i0 + threadIdx.x;
  const bool live = i < g.time;
  float q[HD], gy[HD], dq[HD];
  GW_UNROLL
  for (int c = 0; c < HD; ++c) {
    q[c] = live && c < g.hd ? qkv[g.qkv(i, 0) + c] * g.scale : 0.f;
    gy[c] = live && c < g.hd ? dy[g.y(i) + c] : 0.f;
    dq[c] = 0.f;
  }
  const float li = live ? lse[g.lse(i)] : 0.f, dii = live ? di[g.lse(i)] : 0.f;
  const int last = min(g.time, i0 + R);
  for (int j0 = 0; j0 < last; j0 += R) {
    stage_keys<HD>(ks, vs, qkv, g, j0);
    const int valid = live ? min(R, i - j0 + 1) : 0;
    for (int c = 0; c < valid; ++c) {
      float s = 0.f, dp = 0.f;
      GW_UNROLL
      for (int e = 0; e < HD; ++e) {
        s += q[e] * ks[c * HD + e];
        dp += gy[e] * vs[c * HD + e];
      }
      const float ds = expf(s - li) * (dp * g.drop_scale(i, j0 + c) - dii) * g.scale;
      GW_UNROLL
      for (int e = 0; e < HD; ++e)
        dq[e] += ds * ks[c * HD + e];
    }
  }
  if (!live)
    return;
  GW_UNROLL
  for (int c = 0; c < HD; ++c)
    if (c < g.hd)
      dqkv[g.qkv(i, 0) + c] = dq[c];
}

/// For key j: dv_j = sum over queries i >= j of z_ij p_ij dy_i, and
/// dk_j = scale * sum of p_ij (z_ij dp_ij - di_i) q_i.
template <int HD>
__global__ void attention_bwd_dkv(const float* qkv, const float* dy, const float* lse, const float* di, float* dqkv,
                                  geometry g) {
  constexpr int R = tile_of<HD>::rows;
  __shared__ float qs[R * HD], gs[R * HD], ls[R], ds_[R];
  const int j0 = blockIdx.x * R, j = j0 + threadIdx.x;
  const bool live = j < g.time;
  float k[HD], v[HD], dk[HD], dv[HD];
  GW_UNROLL
  for (int c = 0; c < HD; ++c) {
    k[c] = live && c < g.hd ? qkv[g.qkv(j, 1) + c] : 0.f;
    v[c] = live && c < g.hd ? qkv[g.qkv(j, 2) + c] : 0.f;
    dk[c] = dv[c] = 0.f;
  }
  for (int q0 = j0; q0 < g.time; q0 += R) {
    __syncthreads();
    stage<HD>(qs, qkv, g, q0, R, 0);
    stage<HD>(gs, dy, g, q0, R, -1);
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
      ls[r] = q0 + r < g.time ? lse[g.lse(q0 + r)] : 0.f;
      ds_[r] = q0 + r < g.time ? di[g.lse(q0 + r)] : 0.f;
    }
    __syncthreads();
    if (!live)
      continue;
    const int first = max(0, j - q0), count = min(R, g.time - q0); // queries i >= j only
    for (int r = first; r < count; ++r) {
      float s = 0.f, dp = 0.f;
      GW_UNROLL
      for (int e = 0; e < HD; ++e) {
        s += qs[r * HD + e] * k[e];
        dp += gs[r * HD + e] * v[e];
      }
      const float p = expf(s * g.scale - ls[r]), z = g.drop_scale(q0 + r, j);
      const float ds = p * (dp * z - ds_[r]) * g.scale, pz = p * z;
      GW_UNROLL
      for (int e = 0; e < HD; ++e) {
        dv[e] += pz * gs[r * HD + e];
        dk[e] += ds * qs[r * HD + e];
      }
    }
  }
  if (!live)
    return;
  GW_UNROLL
  for (int c = 0; c < HD; ++c)
    if (c < g.hd) {
      dqkv[g.qkv(j, 1) + c] = dk[c];
      dqkv[g.qkv(j, 2) + c] = dv[c];
    }
}

} // namespace
} // namespace gradwire::kernels::cuda_kernels
