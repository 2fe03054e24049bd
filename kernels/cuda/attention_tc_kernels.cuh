#pragma once
/// @file attention_tc_kernels.cuh
/// Causal attention on the Tensor Cores, in bf16 (train.precision = "bf16";
/// attention.cu launches it). The algorithm of attention_kernels.cuh, with
/// the score and product loops done by warps on 16 x 16 tiles
/// (mma_tile.cuh) instead of by one thread a position:
/// - a block takes `rows` positions, 16 a warp; the other side comes in
///   tiles of `other` positions, staged in shared memory as bf16;
/// - forward: S = Q K^T a tile at a time, an online softmax in fp32 on S
///   (two lanes a row, half the columns each), then O += P V with P rounded
///   to bf16; O and each row's maximum and sum stay fp32;
/// - backward (FlashAttention-2's recomputation from the log-sum-exp): dq
///   by query blocks over key tiles, dk and dv by key blocks over query
///   tiles. Each kernel writes only its own rows: no atomics, and a run
///   repeats itself bit for bit.
/// q, k, v, P, dy and dS enter the products as bf16; every sum is fp32.
/// Dropout masks P where it meets v or dy (P V, P^T dy) and dP, as the
/// fp32 kernels do.
/// Plain CUDA C++ that calls no runtime: the CPU suite runs it on the host
/// too (tests/kernels/host_sim.hpp).

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/mma_tile.cuh"

namespace gradwire::kernels::cuda_kernels {
namespace { // each file that includes these has its own copy

/// A block's shape for heads of up to HD values (16, 32, 64 or 128), kept
/// within 48 KiB of static shared memory.
template <int HD>
struct tc_tile {
  static constexpr int warps = HD <= 64 ? 4 : 2;
  static constexpr int rows = 16 * warps; ///< positions a block takes
  static constexpr int other = 32;        ///< the other side's tile
  static constexpr int threads = 32 * warps;
  static constexpr int n = HD / 16; ///< 16-wide column tiles of a head
};

/// Bytes of `count` T, rounded up to the 32 a warp tile's address needs.
template <typename T>
GW_HOST_DEVICE constexpr int smem_bytes(int count) {
  return (count * static_cast<int>(sizeof(T)) + 31) / 32 * 32;
}

/// Hands out consecutive aligned arrays of one shared-memory buffer.
struct carver {
  unsigned char* at;
  template <typename T>
  __device__ T* take(int count) {
    T* p = reinterpret_cast<T*>(at);
    at += smem_bytes<T>(count);
    return p;
  }
};

/// Rows [from, from + n) of part `part` (of y-shaped `src` when part < 0)
/// into smem rows of HD bf16; rows past the end and columns past the head
/// are zero.
template <int HD>
__device__ void stage_bf16(gw_bf16* smem, const float* src, const geometry& g, int from, int n, int part) {
  for (int i = threadIdx.x; i < n * HD; i += blockDim.x) {
    const int r = i / HD, c = i % HD, t = from + r;
    float v = 0.f;
    if (t < g.time && c < g.hd)
      v = src[(part < 0 ? g.y(t) : g.qkv(t, part)) + c];
    smem[i] = gw_to_bf16(v);
  }
}

/// out (16 x 16 m, fp32, row stride ldo) = a (16 x HD, bf16) . b^T, where
/// b holds 16 m rows of HD: the products of a warp's rows with m tiles of
/// the other side's rows.
template <int HD>
__device__ void rows_times_rows(float* out, int ldo, const gw_bf16* a, const gw_bf16* b, int m) {
  for (int t = 0; t < m; ++t) {
    mma::frag_acc acc;
    mma::zero(acc);
    GW_UNROLL
    for (int kk = 0; kk < HD / 16; ++kk) {
      mma::frag_a fa;
      mma::frag_b_col fb;
      mma::load(fa, a + kk * 16, HD);
      mma::load(fb, b + t * 16 * HD + kk * 16, HD);
      mma::mma(acc, fa, fb);
    }
    mma::store(out + t * 16, acc, ldo);
  }
}

/// acc[t] (16 x 16 tiles of a 16 x HD product) += p (16 x K, bf16) . v
/// (K rows of HD, bf16).
template <int HD, int K>
__device__ void tile_times_rows(mma::frag_acc* acc, const gw_bf16* p, const gw_bf16* v) {
  GW_UNROLL
  for (int t = 0; t < HD / 16; ++t) {
    GW_UNROLL
    for (int kk = 0; kk < K / 16; ++kk) {
      mma::frag_a fa;
      mma::frag_b_row fb;
      mma::load(fa, p + kk * 16, K);
      mma::load(fb, v + kk * 16 * HD + t * 16, HD);
      mma::mma(acc[t], fa, fb);
    }
  }
}

/// One key tile of the online softmax for this lane's half of row r
/// (query i): S scaled and masked, the row's maximum m and sum l moved on,
/// P (times its dropout scale) in bf16 into `prow`, and the row's running
/// output `orow` rescaled.
template <int K>
__device__ void softmax_tile(const float* srow, gw_bf16* prow, float* orow, int hd_bound, const geometry& g, int i,
                             int j0, float& m, float& l) {
  const int half = threadIdx.x % 2;
  float s[K / 2], top = -INFINITY;
  GW_UNROLL
  for (int c = 0; c < K / 2; ++c) {
    const int col = half * (K / 2) + c;
    s[c] = i < g.time && j0 + col <= i ? srow[col] * g.scale : -INFINITY;
    top = fmaxf(top, s[c]);
  }
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
  const float mt = fmaxf(m, top), corr = mt == -INFINITY ? 1.f : expf(m - mt);
  float sum = 0.f;
  GW_UNROLL
  for (int c = 0; c < K / 2; ++c) {
    const int col = half * (K / 2) + c;
    const float p = mt == -INFINITY ? 0.f : expf(s[c] - mt);
    prow[col] = gw_to_bf16(p * g.drop_scale(i, j0 + col));
    sum += p;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  l = l * corr + sum;
  m = mt;
  for (int c = half; c < hd_bound; c += 2)
    orow[c] *= corr;
}

template <int HD>
__global__ void attention_fwd_tc(const float* qkv, float* y, float* lse, geometry g) {
  using T = tc_tile<HD>;
  constexpr int R = T::rows, K = T::other;
  __align__(32) __shared__ unsigned char smem[smem_bytes<gw_bf16>(R * HD) + 2 * smem_bytes<gw_bf16>(K * HD) +
                                              smem_bytes<gw_bf16>(R * K) + smem_bytes<float>(R * K) +
                                              smem_bytes<float>(R * HD)];
  carver cut{smem};
  gw_bf16 *qs = cut.take<gw_bf16>(R * HD), *ks = cut.take<gw_bf16>(K * HD), *vs = cut.take<gw_bf16>(K * HD);
  gw_bf16* ps = cut.take<gw_bf16>(R * K);
  float *ss = cut.take<float>(R * K), *os = cut.take<float>(R * HD);
  const int warp = threadIdx.x / 32, half = threadIdx.x % 2, r = warp * 16 + threadIdx.x % 32 / 2;
  const int i0 = blockIdx.x * R, i = i0 + r; // lanes 2r' and 2r' + 1 of a warp keep its row r'
  stage_bf16<HD>(qs, qkv, g, i0, R, 0);
  for (int c = half; c < HD; c += 2)
    os[r * HD + c] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int last = min(g.time, i0 + R); // keys after the block's last query are masked for all
  for (int j0 = 0; j0 < last; j0 += K) {
    __syncthreads();
    stage_bf16<HD>(ks, qkv, g, j0, K, 1);
    stage_bf16<HD>(vs, qkv, g, j0, K, 2);
    __syncthreads();
    rows_times_rows<HD>(ss + warp * 16 * K, K, qs + warp * 16 * HD, ks, K / 16);
    gw_syncwarp();
    softmax_tile<K>(ss + r * K, ps + r * K, os + r * HD, HD, g, i, j0, m, l);
    gw_syncwarp();
    mma::frag_acc acc[HD / 16];
    GW_UNROLL
    for (int t = 0; t < HD / 16; ++t)
      mma::load(acc[t], os + warp * 16 * HD + t * 16, HD);
    tile_times_rows<HD, K>(acc, ps + warp * 16 * K, vs);
    GW_UNROLL
    for (int t = 0; t < HD / 16; ++t)
      mma::store(os + warp * 16 * HD + t * 16, acc[t], HD);
    gw_syncwarp();
  }
  if (i >= g.time)
    return;
  const float inv = 1.f / l;
  for (int c = half; c < g.hd; c += 2)
    y[g.y(i) + c] = os[r * HD + c] * inv;
  if (half == 0)
    lse[g.lse(i)] = m + logf(l);
}

/// The gradient a block's warps summed in acc (16 x HD each) written to
/// part `part` of dqkv for the block's positions [p0, p0 + rows), through
/// shared memory (`out`, rows x HD floats, free for it).
template <int HD>
__device__ void write_rows(float* out, const mma::frag_acc* acc, float* dqkv, const geometry& g, int p0, int part) {
  const int warp = threadIdx.x / 32, half = threadIdx.x % 2, r = warp * 16 + threadIdx.x % 32 / 2;
  GW_UNROLL
  for (int t = 0; t < HD / 16; ++t)
    mma::store(out + warp * 16 * HD + t * 16, acc[t], HD);
  gw_syncwarp();
  if (p0 + r < g.time)
    for (int c = half; c < g.hd; c += 2)
      dqkv[g.qkv(p0 + r, part) + c] = out[r * HD + c];
  gw_syncwarp();
}

/// The shared memory of a backward kernel: this block's rows of two parts
/// (a, b), the other side's tile of two (c, d), and per row a tile of
/// scores in fp32 and two in bf16.
template <int HD>
struct bwd_smem {
  static constexpr int R = tc_tile<HD>::rows, K = tc_tile<HD>::other;
  static constexpr int bytes = 2 * smem_bytes<gw_bf16>(R * HD) + 2 * smem_bytes<gw_bf16>(K * HD) +
                               2 * smem_bytes<gw_bf16>(R * K) + smem_bytes<float>(R * K) + 2 * smem_bytes<float>(K);
  gw_bf16 *a, *b, *c, *d, *p, *ds;
  float *s, *ls, *dis;
  __device__ explicit bwd_smem(unsigned char* raw) {
    carver cut{raw};
    a = cut.take<gw_bf16>(R * HD), b = cut.take<gw_bf16>(R * HD);
    c = cut.take<gw_bf16>(K * HD), d = cut.take<gw_bf16>(K * HD);
    p = cut.take<gw_bf16>(R * K), ds = cut.take<gw_bf16>(R * K);
    s = cut.take<float>(R * K), ls = cut.take<float>(K), dis = cut.take<float>(K);
  }
  /// Rows x HD floats over the bf16 tiles, once they are done with.
  __device__ float* out() const { return reinterpret_cast<float*>(a); }
};

/// dq[i] = scale * sum over keys j <= i of p_ij (z_ij dp_ij - di_i) k_j, by
/// query blocks: S and dP = dy V^T by tiles, dS in fp32 from P in bf16.
template <int HD>
__global__ void attention_bwd_dq_tc(const float* qkv, const float* dy, const float* lse, const float* di, float* dqkv,
                                    geometry g) {
  using T = tc_tile<HD>;
  constexpr int R = T::rows, K = T::other;
  __align__(32) __shared__ unsigned char raw[bwd_smem<HD>::bytes];
  const bwd_smem<HD> sm(raw); // a: q, b: dy, c: k, d: v
  const int warp = threadIdx.x / 32, half = threadIdx.x % 2, r = warp * 16 + threadIdx.x % 32 / 2;
  const int i0 = blockIdx.x * R, i = i0 + r;
  const bool live = i < g.time;
  const float li = live ? lse[g.lse(i)] : 0.f, dii = live ? di[g.lse(i)] : 0.f;
  stage_bf16<HD>(sm.a, qkv, g, i0, R, 0);
  stage_bf16<HD>(sm.b, dy, g, i0, R, -1);
  mma::frag_acc dq[HD / 16];
  GW_UNROLL
  for (int t = 0; t < HD / 16; ++t)
    mma::zero(dq[t]);
  const int last = min(g.time, i0 + R);
  for (int j0 = 0; j0 < last; j0 += K) {
    __syncthreads();
    stage_bf16<HD>(sm.c, qkv, g, j0, K, 1);
    stage_bf16<HD>(sm.d, qkv, g, j0, K, 2);
    __syncthreads();
    rows_times_rows<HD>(sm.s + warp * 16 * K, K, sm.a + warp * 16 * HD, sm.c, K / 16);
    gw_syncwarp();
    for (int c = half * (K / 2); c < (half + 1) * (K / 2); ++c)
      sm.p[r * K + c] = gw_to_bf16(live && j0 + c <= i ? expf(sm.s[r * K + c] * g.scale - li) : 0.f);
    gw_syncwarp();
    rows_times_rows<HD>(sm.s + warp * 16 * K, K, sm.b + warp * 16 * HD, sm.d, K / 16);
    gw_syncwarp();
    for (int c = half * (K / 2); c < (half + 1) * (K / 2); ++c)
      sm.ds[r * K + c] =
        gw_to_bf16(gw_from_bf16(sm.p[r * K + c]) * (sm.s[r * K + c] * g.drop_scale(i, j0 + c) - dii) * g.scale);
    gw_syncwarp();
    tile_times_rows<HD, K>(dq, sm.ds + warp * 16 * K, sm.c);
  }
  __syncthreads();
  write_rows<HD>(sm.out(), dq, dqkv, g, i0, 0);
}

/// For key j: dv_j = sum over queries i >= j of z_ij p_ij dy_i, and dk_j =
/// scale * sum of p_ij (z_ij dp_ij - di_i) q_i, by key blocks: P^T =
/// exp(K Q^T - lse) and dP^T = V dy^T by tiles. P^T times its dropout
/// scale goes to sm.p for dv; P^T itself waits in sm.ds for dS.
template <int HD>
__global__ void attention_bwd_dkv_tc(const float* qkv, const float* dy, const float* lse, const float* di,
                                     float* dqkv, geometry g) {
  using T = tc_tile<HD>;
  constexpr int R = T::rows, K = T::other;
  __align__(32) __shared__ unsigned char raw[bwd_smem<HD>::bytes];
  const bwd_smem<HD> sm(raw); // a: k, b: v, c: q, d: dy
  const int warp = threadIdx.x / 32, half = threadIdx.x % 2, r = warp * 16 + threadIdx.x % 32 / 2;
  const int j0 = blockIdx.x * R, j = j0 + r;
  stage_bf16<HD>(sm.a, qkv, g, j0, R, 1);
  stage_bf16<HD>(sm.b, qkv, g, j0, R, 2);
  mma::frag_acc dk[HD / 16], dv[HD / 16];
  GW_UNROLL
  for (int t = 0; t < HD / 16; ++t) {
    mma::zero(dk[t]);
    mma::zero(dv[t]);
  }
  for (int q0 = j0; q0 < g.time; q0 += K) {
    __syncthreads();
    stage_bf16<HD>(sm.c, qkv, g, q0, K, 0);
    stage_bf16<HD>(sm.d, dy, g, q0, K, -1);
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
      sm.ls[c] = q0 + c < g.time ? lse[g.lse(q0 + c)] : 0.f;
      sm.dis[c] = q0 + c < g.time ? di[g.lse(q0 + c)] : 0.f;
    }
    __syncthreads();
    rows_times_rows<HD>(sm.s + warp * 16 * K, K, sm.a + warp * 16 * HD, sm.c, K / 16);
    gw_syncwarp();
    for (int c = half * (K / 2); c < (half + 1) * (K / 2); ++c) {
      const int q = q0 + c; // query q sees key j when j <= q
      const float p = j < g.time && j <= q && q < g.time ? expf(sm.s[r * K + c] * g.scale - sm.ls[c]) : 0.f;
      sm.ds[r * K + c] = gw_to_bf16(p);
      sm.p[r * K + c] = gw_to_bf16(p * g.drop_scale(q, j));
    }
    gw_syncwarp();
    tile_times_rows<HD, K>(dv, sm.p + warp * 16 * K, sm.d);
    rows_times_rows<HD>(sm.s + warp * 16 * K, K, sm.b + warp * 16 * HD, sm.d, K / 16);
    gw_syncwarp();
    for (int c = half * (K / 2); c < (half + 1) * (K / 2); ++c)
      sm.ds[r * K + c] = gw_to_bf16(gw_from_bf16(sm.ds[r * K + c]) *
                                    (sm.s[r * K + c] * g.drop_scale(q0 + c, j) - sm.dis[c]) * g.scale);
    gw_syncwarp();
    tile_times_rows<HD, K>(dk, sm.ds + warp * 16 * K, sm.c);
  }
  __syncthreads();
  write_rows<HD>(sm.out(), dk, dqkv, g, j0, 1);
  write_rows<HD>(sm.out(), dv, dqkv, g, j0, 2);
}

} // namespace
} // namespace gradwire::kernels::cuda_kernels
