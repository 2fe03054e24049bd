#pragma once
/// @file direct_conv.hpp
/// Direct convolution for small images (stride 1, output rows of at most 32
/// pixels: LeNet-5's layers, ResNet's 8x8 to 32x32 stages), vectorised along
/// the output row, with no im2col matrix and no GEMM call.
///
/// Why: with few channels the im2col + GEMM path spends its time building and
/// packing column matrices (M = 6 or 16 output channels is far too small for
/// OpenBLAS to amortise its packing) and in col2im. Here every output row is
/// one or two SIMD registers per output channel, accumulated over all taps
/// with broadcast weights; the input gradient is the same kernel on the
/// zero-padded output gradient with flipped, transposed weights; the weight
/// gradient accumulates over the whole batch in registers before one
/// horizontal sum. Compiled for AVX-512 and for AVX2+FMA, chosen at run time
/// (AVX-512 by default; GRADWIRE_DIRECT_CONV=0|avx2|avx512 overrides); other
/// CPUs keep im2col + GEMM.

#include "kernels/backend.hpp"

#include <cstddef>

namespace gradwire::kernels::direct_conv {

/// Whether this CPU has a direct kernel (AVX-512F, or AVX2 with FMA; the
/// AVX2 ones only on request: GRADWIRE_DIRECT_CONV=avx2 or use_isa).
bool available();
/// Use the direct kernels where they apply (default on; tests and benchmarks
/// turn them off to compare with im2col + GEMM). Not thread-safe against
/// running convolutions: set it before training starts.
void set_enabled(bool on);
bool enabled();
/// The instruction set in use ("avx512", "avx2" or "" when none), and a
/// switch to another one this CPU has (tests run both; "default" goes back to
/// the default choice): false when it lacks it.
const char* isa_name();
bool use_isa(const char* name);
/// Whether `g` takes the direct path: enabled, available, stride 1,
/// padding below the kernel size, input and output rows within two (AVX-512)
/// or four (AVX2) registers.
bool applies(const conv_geom& g);

std::size_t workspace_bytes(const conv_geom& g);
void forward(const conv_geom& g, const float* x, const float* w, float* y, float* ws);
/// dw += the weight gradient; dx (when not null) = the input gradient.
void backward(const conv_geom& g, const float* x, const float* w, const float* dy, float* dx,
              float* dw, float* ws);

/// One instruction set's kernels (direct_conv_isa.hpp instantiates them).
struct isa_kernels {
  int lanes = 0;   ///< floats per register
  int max_regs = 0; ///< registers a row may span
  /// out[m][oy][ox] = sum_{c,r,s} wt[((c*R + r)*S + s)*M + m] * in[c][oy + r][ox + s]
  /// for oy < oh, ox < ow. `in` planes are hp x wp floats; reads run up to
  /// lanes * max_regs floats past the last plane (the caller's zeroed tail).
  void (*valid)(const float* in, int c, int hp, int wp, const float* wt, int m, int r, int s,
                float* out, int oh, int ow) = nullptr;
  /// dw[m][c][r][s] += sum_i sum_oy sum_ox dy[i][m][oy][ox] * xp[i][c][oy + r][ox + s]
  /// over `images` images of dy (dense, m x oh x ow) and of xp (padded as
  /// for `valid`, x_img floats apart).
  void (*wgrad)(const float* xp, std::ptrdiff_t x_img, int c, int hp, int wp, const float* dy,
                int m, int oh, int ow, int images, int r, int s, float* dw) = nullptr;
};

const isa_kernels* avx512_kernels();
const isa_kernels* avx2_kernels();

} // namespace gradwire::kernels::direct_conv
