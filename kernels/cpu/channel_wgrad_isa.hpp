#pragma once
/// @file channel_wgrad_isa.hpp
/// The convolution weight gradient vectorised along output channels, as a
/// template over the register width (included after direct_conv_isa.hpp by
/// the one .cpp per instruction set; nothing else may include it).
///
///   dw[m][c][r][s] += sum_i sum_{oy,ox} dyT[i][oy*OW + ox][m] * xp[i][c][oy*st + r][ox*st + s]
///
/// For each output pixel, MV registers of dy (MV*V output channels, from dy
/// transposed to pixel-major) are multiplied by one broadcast input value per
/// tap, and the products accumulate in registers over the whole batch: the
/// block of CB channels x RB kernel rows x S taps x MV registers stays in
/// registers, so each FMA costs one broadcast load and no horizontal sum
/// until the block ends. Any stride; output channels a multiple of V.
///
/// Why not the row-vectorised wgrad of direct_conv_isa.hpp: it reduces along
/// the pixel row, so an 8-pixel row fills half an AVX-512 register, and each
/// block ends in horizontal sums; on ResNet-20's layers it ran at 17-38
/// GFLOP/s against this kernel's figures in bench/RESULTS.md.

namespace gradwire::kernels::direct_conv::GW_ISA {

/// Accumulator registers a block may hold (the rest: dy and the broadcast).
constexpr int cw_acc = GW_CW_ACC;

template <int MV, int S>
struct cw_shape {
  static constexpr int per_row = S * MV;
  static constexpr int rb = cw_acc / per_row < 1 ? 1 : (cw_acc / per_row < S ? cw_acc / per_row : S);
  static constexpr int cb_fit = cw_acc / (rb * per_row);
  static constexpr int cb = cb_fit < 1 ? 1 : (cb_fit > 8 ? 8 : cb_fit);
};

template <int MV, int CB, int RB, int S>
void cw_block(const cw_args& a, int m0, int c0, int r0) {
  vec acc[CB][RB][S][MV] = {};
  const std::ptrdiff_t pix = static_cast<std::ptrdiff_t>(a.oh) * a.ow;
  const std::ptrdiff_t plane = static_cast<std::ptrdiff_t>(a.hp) * a.wp;
  for (int i = 0; i < a.images; ++i) {
    const float* x_img = a.xp + i * a.x_img + (c0 * plane) + static_cast<std::ptrdiff_t>(r0) * a.wp;
    const float* d_img = a.dyT + i * pix * a.m + m0;
    for (int oy = 0; oy < a.oh; ++oy) {
      const float* rows[CB][RB];
      for (int cb = 0; cb < CB; ++cb)
        for (int rb = 0; rb < RB; ++rb)
          rows[cb][rb] = x_img + cb * plane + static_cast<std::ptrdiff_t>(oy * a.stride + rb) * a.wp;
      const float* d = d_img + static_cast<std::ptrdiff_t>(oy) * a.ow * a.m;
      for (int ox = 0; ox < a.ow; ++ox, d += a.m) {
        vec dv[MV];
        for (int v = 0; v < MV; ++v)
          dv[v] = load(d + v * V);
        const int xo = ox * a.stride;
        for (int cb = 0; cb < CB; ++cb)
          for (int rb = 0; rb < RB; ++rb)
            for (int s = 0; s < S; ++s) {
              const vec b = broadcast(rows[cb][rb][xo + s]);
              for (int v = 0; v < MV; ++v)
                acc[cb][rb][s][v] += b * dv[v];
            }
      }
    }
  }
  for (int cb = 0; cb < CB; ++cb)
    for (int rb = 0; rb < RB; ++rb)
      for (int s = 0; s < S; ++s)
        for (int v = 0; v < MV; ++v) {
          float lane[V];
          std::memcpy(lane, &acc[cb][rb][s][v], sizeof lane);
          for (int l = 0; l < V; ++l)
            a.dw[((static_cast<std::ptrdiff_t>(m0 + v * V + l) * a.c + c0 + cb) * a.r + r0 + rb) * S + s] += lane[l];
        }
}

/// Every kernel row of channels [c0, c0 + CB): blocks of RB rows, then one at a time.
template <int MV, int CB, int RB, int S>
void cw_rows(const cw_args& a, int m0, int c0) {
  int r0 = 0;
  for (; r0 + RB <= a.r; r0 += RB)
    cw_block<MV, CB, RB, S>(a, m0, c0, r0);
  for (; r0 < a.r; ++r0)
    cw_block<MV, CB, 1, S>(a, m0, c0, r0);
}

template <int MV, int S>
void cw_channels(const cw_args& a, int m0) {
  constexpr int CB = cw_shape<MV, S>::cb, RB = cw_shape<MV, S>::rb;
  int c0 = 0;
  for (; c0 + CB <= a.c; c0 += CB)
    cw_rows<MV, CB, RB, S>(a, m0, c0);
  for (; c0 < a.c; ++c0)
    cw_rows<MV, 1, RB, S>(a, m0, c0);
}

template <int S>
void cw_taps(const cw_args& a) {
  int m0 = 0;
  for (; m0 + 2 * V <= a.m; m0 += 2 * V)
    cw_channels<2, S>(a, m0);
  for (; m0 < a.m; m0 += V)
    cw_channels<1, S>(a, m0);
}

/// false: no kernel for this width of kernel (S of 3 or 5) or a number of
/// output channels that is not a multiple of V.
inline bool channel_wgrad(const cw_args& a) {
  if (a.m % V != 0)
    return false;
  switch (a.s) {
  case 3: cw_taps<3>(a); return true;
  case 5: cw_taps<5>(a); return true;
  default: return false;
  }
}

} // namespace gradwire::kernels::direct_conv::GW_ISA
