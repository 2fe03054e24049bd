#pragma once
/// @file channel_conv_isa.hpp
/// A convolution vectorised along output channels, as a template over the
/// register width (included by direct_conv_isa.hpp; nothing else may).
///
///   outT[oy*OW + ox][m] = sum_{c,r,s} wt[(c*R + r)*S + s][m] * in[c][oy*st + r][ox*st + s]
///
/// A block of PB output pixels of one row times MV registers of output
/// channels stays in registers over every tap: per tap, MV weight loads and
/// PB broadcast inputs feed PB*MV FMAs. The output is pixel-major (the caller
/// transposes it to NCHW). Any stride and kernel size; M a multiple of V.
/// Used where the row-vectorised kernels of direct_conv_isa.hpp waste lanes
/// (rows of 8 on AVX-512) or do not apply (stride 2), and, on the padded
/// output gradient with flipped weights, for the input gradient.

namespace gradwire::kernels::direct_conv::GW_ISA {

/// Accumulator registers of one block.
constexpr int cc_acc = GW_CC_ACC;

template <int MV, int PB>
void cc_block(const cc_args& a, int m0, int oy, int ox0) {
  vec acc[PB][MV] = {};
  const std::ptrdiff_t plane = static_cast<std::ptrdiff_t>(a.hp) * a.wp;
  const float* wk = a.wt + m0;
  for (int c = 0; c < a.c; ++c)
    for (int r = 0; r < a.r; ++r) {
      const float* row = a.in + c * plane + static_cast<std::ptrdiff_t>(oy * a.stride + r) * a.wp +
                         static_cast<std::ptrdiff_t>(ox0) * a.stride;
      for (int s = 0; s < a.s; ++s, wk += a.m) {
        vec wv[MV];
        for (int v = 0; v < MV; ++v)
          wv[v] = load(wk + v * V);
        for (int p = 0; p < PB; ++p) {
          const vec b = broadcast(row[p * a.stride + s]);
          for (int v = 0; v < MV; ++v)
            acc[p][v] += b * wv[v];
        }
      }
    }
  float* out = a.outT + (static_cast<std::ptrdiff_t>(oy) * a.ow + ox0) * a.m + m0;
  for (int p = 0; p < PB; ++p)
    for (int v = 0; v < MV; ++v)
      store(out + static_cast<std::ptrdiff_t>(p) * a.m + v * V, acc[p][v]);
}

/// One output row in blocks of PB pixels, then halving blocks for the rest.
template <int MV, int PB>
void cc_row(const cc_args& a, int m0, int oy, int ox0) {
  if constexpr (PB >= 1) {
    for (; ox0 + PB <= a.ow; ox0 += PB)
      cc_block<MV, PB>(a, m0, oy, ox0);
    if (ox0 < a.ow)
      cc_row<MV, PB / 2>(a, m0, oy, ox0);
  }
}

/// The largest power of two of pixels whose block fits the accumulators.
constexpr int cc_pixels(int mv) {
  int pb = 1;
  while (2 * pb * mv <= cc_acc)
    pb *= 2;
  return pb;
}

inline bool channel_conv(const cc_args& a) {
  if (a.m % V != 0)
    return false;
  for (int oy = 0; oy < a.oh; ++oy) {
    int m0 = 0;
    for (; m0 + 2 * V <= a.m; m0 += 2 * V)
      cc_row<2, cc_pixels(2)>(a, m0, oy, 0);
    for (; m0 < a.m; m0 += V)
      cc_row<1, cc_pixels(1)>(a, m0, oy, 0);
  }
  return true;
}

} // namespace gradwire::kernels::direct_conv::GW_ISA
