#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <limits>

// Convolution weight gradients computed directly, deterministic, for 3x3
// and 1x1 filters at stride 1 or 2 (ResNet's): dW[k][c][r][s] is the sum
// over images and output positions of dy[n][k][p][q] * x[n][c][p*st+r-pad][q*st+s-pad].
//
// A block owns a 16 x 16 tile of (output channel k, input channel c) pairs,
// one thread each, and a fixed run of images; it stages TH output rows of
// dy and the input rows under them (zero-padded) in shared memory, and each
// thread keeps its R x S sums in registers, sliding a window along each
// input row so that a step of q loads 1 + R*ST values for R*S multiply-adds.
// Blocks write their partial sums, and add_partials (wgrad.cu) adds them in
// block order. A run repeats itself bit for bit.
//
// Why: for ResNet-20's 16-channel layers neither cuDNN's deterministic
// algorithms nor im2col + cuBLAS (the GEMMs are 144 x 16, and cuBLAS's
// tiles are wider) come near cuDNN's nondeterministic one
// (bench/RESULTS.md, "GPU (H200): ResNet-20's weight gradients and BatchNorm"). conv.cu times this path too.

namespace gradwire::kernels {
namespace {

constexpr int tile = 16; // k and c per block
constexpr int rows_per_stage = 8;

struct direct_dims {
  int xr, xw, xstride; // staged input rows, their width, floats per channel (odd: no bank conflicts)
  int dstride;         // floats per output channel of staged dy (odd)
  std::size_t smem_bytes() const { return sizeof(float) * tile * (static_cast<std::size_t>(xstride) + dstride); }
};

direct_dims dims_for(const conv_geom& g) {
  direct_dims d;
  d.xr = (rows_per_stage - 1) * g.stride + g.r;
  d.xw = (g.out_w() - 1) * g.stride + g.s;
  d.xstride = (d.xr * d.xw) | 1;
  d.dstride = (rows_per_stage * g.out_w()) | 1;
  return d;
}

/// Image img's input rows for output rows p0 on of the block's input
/// channels into xs: zeros outside the image and past the last channel.
template <int ST>
__device__ __forceinline__ void stage_x(const float* __restrict__ x, float* xs, const conv_geom& g,
                                        const direct_dims& d, int img, int p0, int cb) {
  const int xn = tile * d.xr * d.xw;
  for (int i = threadIdx.x; i < xn; i += tile * tile) {
    const int ci = i / (d.xr * d.xw), rest = i % (d.xr * d.xw);
    const int xr = rest / d.xw, xw = rest % d.xw;
    const int ch = cb * tile + ci, ih = p0 * ST - g.pad + xr, iw = xw - g.pad;
    float v = 0.f;
    if (ch < g.c && ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
      v = x[((static_cast<std::size_t>(img) * g.c + ch) * g.h + ih) * g.w + iw];
    xs[ci * d.xstride + xr * d.xw + xw] = v;
  }
}

/// Image img's dy rows p0 .. p0 + rows of the block's output channels into
/// ds: zeros past the last channel.
__device__ __forceinline__ void stage_dy(const float* __restrict__ dy, float* ds, const conv_geom& g,
                                         const direct_dims& d, int img, int p0, int rows, int P, int Q, int kb) {
  const int dn = tile * rows * Q;
  for (int i = threadIdx.x; i < dn; i += tile * tile) {
    const int ki = i / (rows * Q), rest = i % (rows * Q);
    const int kc = kb * tile + ki;
    ds[ki * d.dstride + rest] = kc < g.k ? dy[((static_cast<std::size_t>(img) * g.k + kc) * P + p0) * Q + rest] : 0.f;
  }
}

/// This thread's (k, c) sums over the staged rows: a window of S inputs
/// slides along each input row, so a step of q loads ST new values.
template <int R, int S, int ST>
__device__ __forceinline__ void accumulate(float (&acc)[R][S], const float* xc, const float* dk, const direct_dims& d,
                                           int rows, int Q) {
  for (int tr = 0; tr < rows; ++tr) {
    const float* drow = dk + tr * Q;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float* xrow = xc + (tr * ST + r) * d.xw;
      float win[S];
#pragma unroll
      for (int s = 0; s < S; ++s)
        win[s] = xrow[s];
      for (int q = 0; q < Q; ++q) {
        const float dv = drow[q];
#pragma unroll
        for (int s = 0; s < S; ++s)
          acc[r][s] = fmaf(dv, win[s], acc[r][s]);
        if (q + 1 < Q) {
#pragma unroll
          for (int s = 0; s < S; ++s)
            win[s] = s + ST < S ? win[s + ST] : xrow[(q + 1) * ST + s];
        }
      }
    }
  }
}

template <int R, int S, int ST>
__global__ void __launch_bounds__(tile* tile)
  wgrad_direct_kernel(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ part,
                      conv_geom g, int P, int Q, direct_dims d, int images_per_block, int cblocks) {
  extern __shared__ float smem[];
  float* xs = smem;                    // [tile][xr][xw], channel stride xstride
  float* ds = smem + tile * d.xstride; // [tile][rows_per_stage][Q], channel stride dstride
  const int kk = threadIdx.x / tile, cc = threadIdx.x % tile;
  const int kb = blockIdx.y / cblocks, cb = blockIdx.y % cblocks;
  const int k = kb * tile + kk, c = cb * tile + cc;
  const bool mine = k < g.k && c < g.c;
  float acc[R][S];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int s = 0; s < S; ++s)
      acc[r][s] = 0.f;
  const int first = blockIdx.x * images_per_block;
  const int last = min(g.n, first + images_per_block);
  for (int img = first; img < last; ++img)
    for (int p0 = 0; p0 < P; p0 += rows_per_stage) {
      const int rows = min(rows_per_stage, P - p0);
      __syncthreads(); // the last stage's reads are done
      stage_x<ST>(x, xs, g, d, img, p0, cb);
      stage_dy(dy, ds, g, d, img, p0, rows, P, Q, kb);
      __syncthreads();
      if (mine)
        accumulate<R, S, ST>(acc, xs + cc * d.xstride, ds + kk * d.dstride, d, rows, Q);
    }
  if (!mine)
    return;
  float* out = part + static_cast<std::size_t>(blockIdx.x) * g.k * g.c * R * S +
               (static_cast<std::size_t>(k) * g.c + c) * R * S;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int s = 0; s < S; ++s)
      out[r * S + s] = acc[r][s];
}

} // namespace

bool wgrad_direct_fits(const conv_geom& g) {
  const bool shape = (g.r == 3 && g.s == 3) || (g.r == 1 && g.s == 1);
  return shape && (g.stride == 1 || g.stride == 2) && dims_for(g).smem_bytes() <= 48 * 1024;
}

void cuda_backend::wgrad_direct(const conv_geom& g, const float* x, const float* dy, float* dw) {
  const int sms = cuda_detail::sm_count();
  const direct_dims d = dims_for(g);
  const int cblocks = (g.c + tile - 1) / tile, kblocks = (g.k + tile - 1) / tile;
  // About four blocks per SM in all.
  const int per = std::max(1, g.n * cblocks * kblocks / (4 * sms));
  const int blocks = (g.n + per - 1) / per;
  const std::size_t len = static_cast<std::size_t>(g.k) * g.c * g.r * g.s;
  auto* part = static_cast<float*>(scratch(sizeof(float) * len * blocks));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(cblocks * kblocks));
  const int P = g.out_h(), Q = g.out_w();
  const std::size_t sm = d.smem_bytes();
  if (g.r == 3 && g.stride == 1)
    wgrad_direct_kernel<3, 3, 1><<<grid, tile * tile, sm, stream_>>>(x, dy, part, g, P, Q, d, per, cblocks);
  else if (g.r == 3)
    wgrad_direct_kernel<3, 3, 2><<<grid, tile * tile, sm, stream_>>>(x, dy, part, g, P, Q, d, per, cblocks);
  else if (g.stride == 1)
    wgrad_direct_kernel<1, 1, 1><<<grid, tile * tile, sm, stream_>>>(x, dy, part, g, P, Q, d, per, cblocks);
  else
    wgrad_direct_kernel<1, 1, 2><<<grid, tile * tile, sm, stream_>>>(x, dy, part, g, P, Q, d, per, cblocks);
  GW_CUDA_LAUNCHED();
  add_partials(part, blocks, len, dw);
}

} // namespace gradwire::kernels
