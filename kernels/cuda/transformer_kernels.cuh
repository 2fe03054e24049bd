#pragma once
/// @file transformer_kernels.cuh
/// The device code of the transformer's passes besides attention
/// (transformer.cu launches it). Plain CUDA C++ that calls no runtime, so
/// tests/kernels/host_sim.hpp can also run it on the host, a thread per
/// CUDA thread, and the CPU suite checks it
/// (tests/kernels/test_cuda_on_host.cpp).
///
/// The transformer passes besides attention, as the CPU reference defines
/// them (kernels/cpu/transformer.cpp): LayerNorm with biased variance and
/// row sums in double, exact GELU (erf), the token and position embeddings,
/// dropout.
/// Every sum runs in a fixed order, with no atomics, so a run repeats itself
/// bit for bit: a row's statistics by one warp, a column's parameter
/// gradients by fixed slices of rows, then the slices in order.

#include "kernels/cuda/device_code.cuh"
#include "kernels/dropout_mask.hpp"

namespace gradwire::kernels::cuda_kernels {
namespace { // each file that includes these has its own copy

/// Threads of a block that takes a row a warp.
constexpr int row_block_threads = 256;
constexpr int warps_per_block = row_block_threads / 32;
constexpr float inv_sqrt2 = 0.70710678118654752f, inv_sqrt_2pi = 0.39894228040143268f;

__device__ double warp_sum(double v) {
  for (int off = 16; off > 0; off /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/// One warp per row: mean and rstd in double, then y.
__global__ void layernorm_fwd(const float* x, float* y, float* mean, float* rstd, const float* w,
                              const float* b, int rows, int cols, float eps) {
  const int row = blockIdx.x * warps_per_block + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  const float* xr = x + static_cast<std::size_t>(row) * cols;
  double s = 0;
  for (int j = lane; j < cols; j += 32)
    s += xr[j];
  const double mu = warp_sum(s) / cols;
  double ss = 0;
  for (int j = lane; j < cols; j += 32) {
    const double c = xr[j] - mu;
    ss += c * c;
  }
  const float m = static_cast<float>(mu);
  const float r = static_cast<float>(1.0 / sqrt(warp_sum(ss) / cols + eps));
  float* yr = y + static_cast<std::size_t>(row) * cols;
  for (int j = lane; j < cols; j += 32)
    yr[j] = (xr[j] - m) * r * w[j] + b[j];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

/// Row slices of LayerNorm's parameter gradients: enough blocks to fill a
/// GPU at any width, each slice a fixed run of rows.
constexpr int ln_slices = 64;

/// Slice s's sums of dy * xhat and of dy for column j, rows in order, into
/// part[s][j] and part[ln_slices + s][j]. Runs before layernorm_bwd_rows,
/// which may overwrite dy with dx.
__global__ void layernorm_bwd_partials(const float* x, const float* dy, const float* mean, const float* rstd,
                                       float* part, int rows, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
  if (j >= cols)
    return;
  const int per = (rows + ln_slices - 1) / ln_slices, end = min(rows, (s + 1) * per);
  float gw = 0.f, gb = 0.f;
  for (int i = s * per; i < end; ++i) {
    const std::size_t o = static_cast<std::size_t>(i) * cols + j;
    const float xhat = (x[o] - mean[i]) * rstd[i];
    gw += dy[o] * xhat;
    gb += dy[o];
  }
  part[static_cast<std::size_t>(s) * cols + j] = gw;
  part[static_cast<std::size_t>(ln_slices + s) * cols + j] = gb;
}

/// dw[j] and db[j] += their slices' sums, in slice order.
__global__ void layernorm_bwd_params(const float* part, float* dw, float* db, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols)
    return;
  float gw = 0.f, gb = 0.f;
  for (int s = 0; s < ln_slices; ++s) {
    gw += part[static_cast<std::size_t>(s) * cols + j];
    gb += part[static_cast<std::size_t>(ln_slices + s) * cols + j];
  }
  dw[j] += gw;
  db[j] += gb;
}

/// dx = rstd * (dy w - mean(dy w) - xhat mean(dy w xhat)), one warp per row
/// (dx may be dy: each lane reads its values before writing them).
__global__ void layernorm_bwd_rows(const float* x, const float* dy, const float* mean, const float* rstd,
                                   const float* w, float* dx, int rows, int cols) {
  const int row = blockIdx.x * warps_per_block + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  const std::size_t o = static_cast<std::size_t>(row) * cols;
  const float mu = mean[row], r = rstd[row];
  double s1 = 0, s2 = 0;
  for (int j = lane; j < cols; j += 32) {
    const float xhat = (x[o + j] - mu) * r;
    const float g = dy[o + j] * w[j];
    s1 += g;
    s2 += static_cast<double>(g) * xhat;
  }
  const float m1 = static_cast<float>(warp_sum(s1) / cols), m2 = static_cast<float>(warp_sum(s2) / cols);
  for (int j = lane; j < cols; j += 32) {
    const float xhat = (x[o + j] - mu) * r;
    dx[o + j] = r * (dy[o + j] * w[j] - m1 - xhat * m2);
  }
}

/// Dropout in place: element i of x is element first + i of the mask
/// (kernels/dropout_mask.hpp); kept values times its keep_scale.
__global__ void dropout_apply(float* x, std::size_t n, dropout_mask mask, std::uint64_t first) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = mask.keeps(first + i) ? x[i] * mask.keep_scale : 0.f;
}

__global__ void gelu_fwd(const float* x, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = 0.5f * x[i] * (1.f + erff(x[i] * inv_sqrt2));
}

__global__ void gelu_bwd(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = x[i];
    dx[i] = dy[i] * (0.5f * (1.f + erff(v * inv_sqrt2)) + v * inv_sqrt_2pi * expf(-0.5f * v * v));
  }
}

/// The first position whose token is no integer in [0, vocab): atomicMin
/// into *bad (left at INT_MAX when every token is one). The row is written
/// either way; the host throws before anything reads it.
__global__ void embedding_fwd(const float* tokens, const float* wte, const float* wpe, float* h, int rows,
                              int time, int d, int vocab, int* bad) {
  const std::size_t n = static_cast<std::size_t>(rows) * d;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int at = static_cast<int>(i / d), j = static_cast<int>(i % d);
    const float t = tokens[at];
    const bool ok = t >= 0.f && t < static_cast<float>(vocab) && t == floorf(t);
    if (!ok && j == 0)
      atomicMin(bad, at);
    const int tok = ok ? static_cast<int>(t) : 0;
    h[i] = wte[static_cast<std::size_t>(tok) * d + j] + wpe[static_cast<std::size_t>(at % time) * d + j];
  }
}

/// dwpe[t, j] += dh[b, t, j] over b in order: one thread per (t, j).
__global__ void embedding_bwd_positions(const float* dh, float* dwpe, int batch, int time, int d) {
  const std::size_t n = static_cast<std::size_t>(time) * d;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float s = dwpe[i];
    for (int b = 0; b < batch; ++b)
      s += dh[static_cast<std::size_t>(b) * n + i];
    dwpe[i] = s;
  }
}

/// dwte[v, j] += dh[p, j] over the positions p holding token v, in order:
/// block v walks every position (a broadcast read of one token each),
/// its threads the columns. O(vocab x rows) reads of the tokens: byte
/// vocabularies are 256.
__global__ void embedding_bwd_tokens(const float* tokens, const float* dh, float* dwte, int rows, int d) {
  const int v = blockIdx.x;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float s = dwte[static_cast<std::size_t>(v) * d + j];
    for (int p = 0; p < rows; ++p)
      if (static_cast<int>(tokens[p]) == v)
        s += dh[static_cast<std::size_t>(p) * d + j];
    dwte[static_cast<std::size_t>(v) * d + j] = s;
  }
}

} // namespace
} // namespace gradwire::kernels::cuda_kernels
