#pragma once
/// @file direct_conv_isa.hpp
/// The direct-convolution kernels as templates over the register width.
/// Included by one .cpp per instruction set, each compiled with its own
/// -m flags (direct_conv_avx512.cpp, direct_conv_avx2.cpp); nothing else may
/// include it, so that no AVX code leaks into generic translation units.
///
/// GCC vector extensions: `vec` is one register of V floats; loads and
/// stores go through unaligned (aligned(4)) views; partial registers use the
/// instruction set's masked loads and stores.

#include "kernels/cpu/direct_conv.hpp"

#include <immintrin.h>

#include <cstring>
#include <utility>

namespace gradwire::kernels::direct_conv::GW_ISA {

constexpr int V = GW_LANES;
typedef float vec __attribute__((vector_size(4 * V)));
typedef float vec_u __attribute__((vector_size(4 * V), aligned(4)));

inline vec load(const float* p) { return *reinterpret_cast<const vec_u*>(p); }
inline void store(float* p, vec v) { *reinterpret_cast<vec_u*>(p) = v; }
// The first n (< V) lanes only; masked lanes are neither read nor written,
// so these never touch memory past p[n - 1].
#if GW_LANES == 16
inline void store_part(float* p, vec v, int n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
}
inline vec load_part(const float* p, int n) {
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}
#else
inline __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline void store_part(float* p, vec v, int n) { _mm256_maskstore_ps(p, lane_mask(n), v); }
inline vec load_part(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
#endif
/// All lanes = x. (`x - vec{}` folds to a plain broadcast: subtracting +0 is
/// exact; `vec{} + x` is not, as -0 + +0 = +0, and costs an add per use.)
inline vec broadcast(float x) { return x - vec{}; }
inline float hsum(vec v) {
  float tmp[V];
  std::memcpy(tmp, &v, sizeof tmp);
  float s = 0.f;
  for (int i = 0; i < V; ++i)
    s += tmp[i];
  return s;
}

/// MB output channels, rows of NV registers.
template <int MB, int NV>
void valid_block(const float* in, int c, int hp, int wp, const float* wt, int m, int m0, int r,
                 int s, float* out, int oh, int ow) {
  const std::ptrdiff_t plane = static_cast<std::ptrdiff_t>(hp) * wp;
  const std::ptrdiff_t out_plane = static_cast<std::ptrdiff_t>(oh) * ow;
  for (int oy = 0; oy < oh; ++oy) {
    vec acc[MB][NV] = {};
    const float* wk = wt + m0;
    for (int ci = 0; ci < c; ++ci)
      for (int ri = 0; ri < r; ++ri) {
        const float* row = in + ci * plane + static_cast<std::ptrdiff_t>(oy + ri) * wp;
        for (int si = 0; si < s; ++si, wk += m) {
          vec xv[NV];
          for (int v = 0; v < NV; ++v)
            xv[v] = load(row + si + v * V);
          for (int mb = 0; mb < MB; ++mb) {
            const vec b = broadcast(wk[mb]);
            for (int v = 0; v < NV; ++v)
              acc[mb][v] += b * xv[v];
          }
        }
      }
    for (int mb = 0; mb < MB; ++mb) {
      float* o = out + (m0 + mb) * out_plane + static_cast<std::ptrdiff_t>(oy) * ow;
      for (int v = 0; v < NV; ++v) {
        const int left = ow - v * V;
        if (left >= V)
          store(o + v * V, acc[mb][v]);
        else if (left > 0)
          store_part(o + v * V, acc[mb][v], left);
      }
    }
  }
}

constexpr int acc_regs = GW_ACC_REGS;

template <int NV, int MB = acc_regs / NV>
void valid_nv(const float* in, int c, int hp, int wp, const float* wt, int m, int m0, int mb,
              int r, int s, float* out, int oh, int ow) {
  if constexpr (MB >= 1) {
    if (mb == MB)
      valid_block<MB, NV>(in, c, hp, wp, wt, m, m0, r, s, out, oh, ow);
    else
      valid_nv<NV, MB - 1>(in, c, hp, wp, wt, m, m0, mb, r, s, out, oh, ow);
  }
}

template <int NV>
void valid_rows(const float* in, int c, int hp, int wp, const float* wt, int m, int r, int s,
                float* out, int oh, int ow) {
  // Blocks of equal size (6 channels: one block of 6, not 4 + 2).
  constexpr int mb_max = acc_regs / NV;
  const int blocks = (m + mb_max - 1) / mb_max;
  for (int b = 0, m0 = 0; b < blocks; ++b) {
    const int mb = (m - m0 + (blocks - b) - 1) / (blocks - b);
    valid_nv<NV>(in, c, hp, wp, wt, m, m0, mb, r, s, out, oh, ow);
    m0 += mb;
  }
}

inline void valid(const float* in, int c, int hp, int wp, const float* wt, int m, int r, int s,
                  float* out, int oh, int ow) {
  const int nv = (ow + V - 1) / V;
  switch (nv) {
  case 1: valid_rows<1>(in, c, hp, wp, wt, m, r, s, out, oh, ow); break;
  case 2: valid_rows<2>(in, c, hp, wp, wt, m, r, s, out, oh, ow); break;
#if GW_MAX_REGS > 2
  case 3: valid_rows<3>(in, c, hp, wp, wt, m, r, s, out, oh, ow); break;
  case 4: valid_rows<4>(in, c, hp, wp, wt, m, r, s, out, oh, ow); break;
#endif
  default: break; // applies() keeps rows within GW_MAX_REGS registers
  }
}

constexpr int wg_mb = GW_WGRAD_MB;
constexpr int wg_st = GW_WGRAD_ST;

/// Weight gradient of wg_mb channels (those past m read as zero) x ST taps
/// of one kernel row, over all images.
template <int ST, int NV>
void wgrad_block(const float* xp, std::ptrdiff_t x_img, int ci, int hp, int wp, const float* dy,
                 int m, int m0, int oh, int ow, int images, int c, int r, int ri, int s, int s0,
                 float* dw) {
  vec acc[wg_mb][ST] = {};
  const std::ptrdiff_t dy_plane = static_cast<std::ptrdiff_t>(oh) * ow;
  const int mb_live = m - m0 < wg_mb ? m - m0 : wg_mb;
  for (int i = 0; i < images; ++i) {
    const float* x_rows = xp + i * x_img + static_cast<std::ptrdiff_t>(ci) * hp * wp + ri * wp + s0;
    const float* d_rows = dy + (i * static_cast<std::ptrdiff_t>(m) + m0) * dy_plane;
    for (int oy = 0; oy < oh; ++oy) {
      const float* xr = x_rows + static_cast<std::ptrdiff_t>(oy) * wp;
      const float* dr = d_rows + static_cast<std::ptrdiff_t>(oy) * ow;
      for (int v = 0; v < NV; ++v) {
        // Lanes past the row's end must be zero (they pair with padding).
        const int left = ow - v * V;
        vec d[wg_mb];
        for (int mb = 0; mb < wg_mb; ++mb)
          d[mb] = mb >= mb_live ? vec{} : left >= V ? load(dr + mb * dy_plane + v * V)
                                                    : load_part(dr + mb * dy_plane + v * V, left);
        for (int st = 0; st < ST; ++st) {
          const vec xv = load(xr + st + v * V);
          for (int mb = 0; mb < wg_mb; ++mb)
            acc[mb][st] += d[mb] * xv;
        }
      }
    }
  }
  for (int mb = 0; mb < wg_mb && m0 + mb < m; ++mb)
    for (int st = 0; st < ST; ++st)
      dw[((static_cast<std::ptrdiff_t>(m0 + mb) * c + ci) * r + ri) * s + s0 + st] += hsum(acc[mb][st]);
}

template <int NV, int ST = wg_st>
void wgrad_st(int st, const float* xp, std::ptrdiff_t x_img, int ci, int hp, int wp,
              const float* dy, int m, int m0, int oh, int ow, int images, int c, int r, int ri,
              int s, int s0, float* dw) {
  if constexpr (ST >= 1) {
    if (st == ST)
      wgrad_block<ST, NV>(xp, x_img, ci, hp, wp, dy, m, m0, oh, ow, images, c, r, ri, s, s0, dw);
    else
      wgrad_st<NV, ST - 1>(st, xp, x_img, ci, hp, wp, dy, m, m0, oh, ow, images, c, r, ri, s, s0, dw);
  }
}

template <int NV>
void wgrad_nv(const float* xp, std::ptrdiff_t x_img, int c, int hp, int wp, const float* dy,
              int m, int oh, int ow, int images, int r, int s, float* dw) {
  for (int ci = 0; ci < c; ++ci)
    for (int ri = 0; ri < r; ++ri)
      for (int m0 = 0; m0 < m; m0 += wg_mb)
        for (int s0 = 0; s0 < s; s0 += wg_st) {
          const int st = s - s0 < wg_st ? s - s0 : wg_st;
          wgrad_st<NV>(st, xp, x_img, ci, hp, wp, dy, m, m0, oh, ow, images, c, r, ri, s, s0, dw);
        }
}

inline void wgrad(const float* xp, std::ptrdiff_t x_img, int c, int hp, int wp, const float* dy,
                  int m, int oh, int ow, int images, int r, int s, float* dw) {
  switch ((ow + V - 1) / V) {
  case 1: wgrad_nv<1>(xp, x_img, c, hp, wp, dy, m, oh, ow, images, r, s, dw); break;
  case 2: wgrad_nv<2>(xp, x_img, c, hp, wp, dy, m, oh, ow, images, r, s, dw); break;
#if GW_MAX_REGS > 2
  case 3: wgrad_nv<3>(xp, x_img, c, hp, wp, dy, m, oh, ow, images, r, s, dw); break;
  case 4: wgrad_nv<4>(xp, x_img, c, hp, wp, dy, m, oh, ow, images, r, s, dw); break;
#endif
  default: break;
  }
}

} // namespace gradwire::kernels::direct_conv::GW_ISA

#include "kernels/cpu/channel_wgrad_isa.hpp"
#include "kernels/cpu/channel_conv_isa.hpp"
#include "kernels/cpu/transpose_isa.hpp"

namespace gradwire::kernels::direct_conv::GW_ISA {

inline const isa_kernels* kernels() {
  static const isa_kernels k = [] {
    isa_kernels t;
    t.lanes = V;
    t.max_regs = GW_MAX_REGS;
    t.valid = &valid;
    t.wgrad = &wgrad;
    t.channel_wgrad = &channel_wgrad;
    t.channel_conv = &channel_conv;
    t.transpose = &transpose;
    return t;
  }();
  return &k;
}

} // namespace gradwire::kernels::direct_conv::GW_ISA
