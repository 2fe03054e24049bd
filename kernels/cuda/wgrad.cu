#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <limits>

// Convolution weight gradients as GEMMs, deterministic: dW (K x CRS) is the
// sum over images of dY (K x PQ) times im2col(x) (PQ x CRS) transposed.
// Images go in groups of G: a group's dY planes are laid side by side
// (K x G*PQ) and so are its columns (CRS x G*PQ), so one GEMM reduces over
// the whole group; cuBLAS runs the groups as one strided batch (plain FP32,
// deterministic on one stream), and a last kernel adds the groups' partial
// sums in group order into dW. A tail group is padded with zeros.
//
// cuDNN's deterministic weight-gradient algorithms are slow for ResNet-20's
// few channels, several times its nondeterministic one (atomics), and a
// large share of a step (bench/RESULTS.md, "GPU (H200): ResNet-20's weight gradients and BatchNorm"). conv.cu times this path against
// cuDNN's deterministic choice per geometry and keeps the faster.

namespace gradwire::kernels {
namespace {

constexpr std::size_t max_col_bytes = std::size_t{64} << 20;

// A block per (image of the chunk, row), threads along the PQ output
// positions: the row's indices are worked out once per block, and a thread
// divides once (no 64-bit division per element).
//
// col[gr][crs][gi*PQ + pq] for the chunk's images (row = crs), zeros past
// the batch. (conv_geom's out_h/out_w are host functions: out_w comes in.)
__global__ void im2col_groups(const float* x, float* col, conv_geom g, int out_w, int pq_n,
                              int first, int group) {
  const int pq = blockIdx.x * blockDim.x + threadIdx.x;
  if (pq >= pq_n)
    return;
  const int crs = blockIdx.y, local = blockIdx.z, img = first + local;
  const int crs_n = g.c * g.r * g.s;
  const int ch = crs / (g.r * g.s), r = (crs / g.s) % g.r, s = crs % g.s;
  const int ih = (pq / out_w) * g.stride + r - g.pad, iw = (pq % out_w) * g.stride + s - g.pad;
  float v = 0.f;
  if (img < g.n && ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
    v = x[((static_cast<std::size_t>(img) * g.c + ch) * g.h + ih) * g.w + iw];
  const int gr = local / group, gi = local % group;
  col[(static_cast<std::size_t>(gr) * crs_n + crs) * (static_cast<std::size_t>(group) * pq_n) +
      static_cast<std::size_t>(gi) * pq_n + pq] = v;
}

// dyt[gr][k][gi*PQ + pq] = dy[img][k][pq] (row = k), zeros past the batch.
__global__ void group_dy(const float* dy, float* dyt, int k_n, int pq_n, int n, int first, int group) {
  const int pq = blockIdx.x * blockDim.x + threadIdx.x;
  if (pq >= pq_n)
    return;
  const int k = blockIdx.y, local = blockIdx.z, img = first + local;
  const int gr = local / group, gi = local % group;
  dyt[(static_cast<std::size_t>(gr) * k_n + k) * (static_cast<std::size_t>(group) * pq_n) +
      static_cast<std::size_t>(gi) * pq_n + pq] =
    img < n ? dy[(static_cast<std::size_t>(img) * k_n + k) * pq_n + pq] : 0.f;
}

// dw[j] += sum over i of part[i][j], in order of i.
__global__ void sum_partials(const float* part, int count, std::size_t len, float* dw) {
  for (std::size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < len; j += gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int i = 0; i < count; ++i)
      s += part[static_cast<std::size_t>(i) * len + j];
    dw[j] += s;
  }
}

} // namespace

void wgrad_shape::choose(const conv_geom& g, int reduction) {
  const int pq = g.out_h() * g.out_w();
  // About `reduction` values summed per GEMM, at most the batch's.
  group = std::max(1, std::min(g.n, reduction / std::max(1, pq)));
  groups = (g.n + group - 1) / group;
  const std::size_t col_per_group = sizeof(float) * static_cast<std::size_t>(group) * g.c * g.r * g.s * pq;
  groups_per_chunk = static_cast<int>(std::clamp<std::size_t>(max_col_bytes / col_per_group, 1, groups));
  // A grid's y and z extents: the rows (C*R*S, K) and a chunk's images.
  usable = g.c * g.r * g.s <= 65535 && g.k <= 65535;
  while (groups_per_chunk > 1 && static_cast<long long>(groups_per_chunk) * group > 65535)
    --groups_per_chunk;
  usable = usable && static_cast<long long>(groups_per_chunk) * group <= 65535;
}

std::size_t wgrad_shape::scratch_bytes(const conv_geom& g) const {
  const std::size_t pq = static_cast<std::size_t>(g.out_h()) * g.out_w();
  const std::size_t chunk = static_cast<std::size_t>(groups_per_chunk) * group;
  const std::size_t crs = static_cast<std::size_t>(g.c) * g.r * g.s;
  return sizeof(float) * (chunk * crs * pq + chunk * g.k * pq + static_cast<std::size_t>(groups) * g.k * crs);
}

void cuda_backend::wgrad_gemm(const conv_geom& g, const wgrad_shape& ws, const float* x,
                              const float* dy, float* dw) {
  const int pq = g.out_h() * g.out_w(), crs = g.c * g.r * g.s;
  const std::size_t chunk = static_cast<std::size_t>(ws.groups_per_chunk) * ws.group;
  auto* col = static_cast<float*>(scratch(ws.scratch_bytes(g)));
  float* dyt = col + chunk * crs * pq;
  float* part = dyt + chunk * g.k * pq;
  const long long L = static_cast<long long>(ws.group) * pq;
  const float one = 1.f, zero = 0.f;
  for (int gr0 = 0; gr0 < ws.groups; gr0 += ws.groups_per_chunk) {
    const int groups = std::min(ws.groups_per_chunk, ws.groups - gr0);
    const int first = gr0 * ws.group, images = groups * ws.group;
    const int tpb = cuda_detail::row_threads(pq);
    const unsigned parts = static_cast<unsigned>((pq + tpb - 1) / tpb);
    im2col_groups<<<dim3(parts, static_cast<unsigned>(crs), static_cast<unsigned>(images)), tpb, 0, stream_>>>(
      x, col, g, g.out_w(), pq, first, ws.group);
    GW_CUDA_LAUNCHED();
    group_dy<<<dim3(parts, static_cast<unsigned>(g.k), static_cast<unsigned>(images)), tpb, 0, stream_>>>(
      dy, dyt, g.k, pq, g.n, first, ws.group);
    GW_CUDA_LAUNCHED();
    // Row-major part[gr] (K x CRS) = dyt[gr] (K x L) * col[gr]^T (L x CRS):
    // column-major, part^T = col^T (op T of an L x CRS matrix) * dyt^T.
    GW_CUBLAS(cublasSgemmStridedBatched(blas_, CUBLAS_OP_T, CUBLAS_OP_N, crs, g.k, static_cast<int>(L),
                                        &one, col, static_cast<int>(L), L * crs, dyt, static_cast<int>(L),
                                        L * g.k, &zero, part + static_cast<std::size_t>(gr0) * g.k * crs,
                                        crs, static_cast<long long>(g.k) * crs, groups));
  }
  add_partials(part, ws.groups, static_cast<std::size_t>(g.k) * crs, dw);
}

void cuda_backend::add_partials(const float* part, int count, std::size_t len, float* dw) {
  sum_partials<<<cuda_detail::blocks_for(len), cuda_detail::threads_per_block, 0, stream_>>>(part, count, len,
                                                                                       dw);
  GW_CUDA_LAUNCHED();
}

float cuda_backend::time_wgrad(const conv_geom& g, const wgrad_shape* ws) {
  const std::size_t xs = sizeof(float) * static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
  const std::size_t ys = sizeof(float) * static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
  const std::size_t wsz = sizeof(float) * static_cast<std::size_t>(g.k) * g.c * g.r * g.s;
  void *x = nullptr, *dy = nullptr, *dw = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  float best = std::numeric_limits<float>::infinity();
  if (ws != nullptr ? !ws->usable : !wgrad_direct_fits(g))
    return best;
  try {
    GW_CUDA(cudaMalloc(&x, xs));
    GW_CUDA(cudaMalloc(&dy, ys));
    GW_CUDA(cudaMalloc(&dw, wsz));
    GW_CUDA(cudaMemsetAsync(x, 0, xs, stream_));
    GW_CUDA(cudaMemsetAsync(dy, 0, ys, stream_));
    GW_CUDA(cudaMemsetAsync(dw, 0, wsz, stream_));
    GW_CUDA(cudaEventCreate(&a));
    GW_CUDA(cudaEventCreate(&b));
    const auto once = [&] {
      if (ws != nullptr)
        wgrad_gemm(g, *ws, static_cast<float*>(x), static_cast<float*>(dy), static_cast<float*>(dw));
      else
        wgrad_direct(g, static_cast<float*>(x), static_cast<float*>(dy), static_cast<float*>(dw));
    };
    once(); // warm-up
    for (int rep = 0; rep < 3; ++rep) {
      GW_CUDA(cudaEventRecord(a, stream_));
      once();
      GW_CUDA(cudaEventRecord(b, stream_));
      GW_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      GW_CUDA(cudaEventElapsedTime(&ms, a, b));
      best = std::min(best, ms);
    }
  } catch (...) {
    best = std::numeric_limits<float>::infinity(); // e.g. out of memory: cuDNN's path stays
  }
  cudaStreamSynchronize(stream_);
  cudaGetLastError();
  for (cudaEvent_t e : {a, b})
    if (e != nullptr)
      cudaEventDestroy(e);
  for (void* q : {x, dy, dw})
    if (q != nullptr)
      cudaFree(q);
  return best;
}

} // namespace gradwire::kernels
