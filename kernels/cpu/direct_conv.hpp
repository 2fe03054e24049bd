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
/// (AVX-512 where the CPU has it, else AVX2; GRADWIRE_DIRECT_CONV=0|avx2|avx512
/// overrides); other CPUs keep im2col + GEMM.

#include "kernels/backend.hpp"

#include <cstddef>

namespace gradwire::kernels::direct_conv {

/// Whether this CPU has a direct kernel (AVX-512F, or AVX2 with FMA).
bool available();
/// Use the direct kernels where they apply (default on; tests and benchmarks
/// turn them off to compare with im2col + GEMM). Not thread-safe against
/// running convolutions: set it before training starts.
void set_enabled(bool on);
/// The rule that leaves rows filling at most half a register to im2col + GEMM
/// (default on); tests turn it off to check the kernels at every width.
void set_width_rule(bool on);
bool enabled();
/// The instruction set in use ("avx512", "avx2" or "" when none), and a
/// switch to another one this CPU has (tests run both; "default" goes back to
/// the default choice): false when it lacks it.
const char* isa_name();
bool use_isa(const char* name);
/// Whether `g` takes the direct path: enabled, available, stride 1,
/// padding below the kernel size, input and output rows within two (AVX-512)
/// or four (AVX2) registers, and not both at most half of one (set_width_rule).
bool applies(const conv_geom& g);

std::size_t workspace_bytes(const conv_geom& g);
void forward(const conv_geom& g, const float* x, const float* w, float* y, float* ws);
/// dw (when not null) += the weight gradient; dx (when not null) = the input gradient.
void backward(const conv_geom& g, const float* x, const float* w, const float* dy, float* dx,
              float* dw, float* ws);

/// The weight gradient vectorised along output channels (channel_wgrad_isa.hpp),
/// for any stride and for 3x3 and 5x5 kernels with a multiple of the
/// register width of output channels; the rest use the row kernels of
/// `backward` or im2col + GEMM. On by default; GRADWIRE_WGRAD=rows or
/// set_channel_wgrad(false) turns it off (A/B comparisons, tests).
bool channel_wgrad_applies(const conv_geom& g);
void set_channel_wgrad(bool on);
std::size_t channel_wgrad_workspace_bytes(const conv_geom& g);
/// dw += the weight gradient of g for input x and output gradient dy.
void channel_wgrad(const conv_geom& g, const float* x, const float* dy, float* dw, float* ws);

/// Arguments of one instruction set's channel_wgrad kernel: `images` images of
/// xp (each [c][hp][wp], padded, x_img floats apart) and of dyT (each
/// [oh*ow][m], pixel-major); dw is [m][c][r][s].
struct cw_args {
  const float* xp = nullptr;
  std::ptrdiff_t x_img = 0;
  int c = 0, hp = 0, wp = 0;
  const float* dyT = nullptr;
  int m = 0, oh = 0, ow = 0, stride = 1, images = 0, r = 0, s = 0;
  float* dw = nullptr;
};

/// The convolution vectorised along output channels (channel_conv_isa.hpp),
/// for the forward pass at any stride and, at stride 1, the input gradient:
/// 3x3 and 5x5 kernels whose outputs (input channels, for the input
/// gradient) are a multiple of the register width. GRADWIRE_CONV=rows or
/// set_channel_conv(false) turns it off.
bool channel_forward_applies(const conv_geom& g);
bool channel_input_grad_applies(const conv_geom& g);
void set_channel_conv(bool on);
std::size_t channel_conv_workspace_bytes(const conv_geom& g);
void channel_forward(const conv_geom& g, const float* x, const float* w, float* y, float* ws);
/// dx = the input gradient of g for output gradient dy.
void channel_input_grad(const conv_geom& g, const float* w, const float* dy, float* dx, float* ws);

/// Arguments of one instruction set's channel_conv kernel, for one image:
/// `in` is [c][hp][wp] (padded), wt [c*r*s][m], outT [oh*ow][m].
struct cc_args {
  const float* in = nullptr;
  int c = 0, hp = 0, wp = 0;
  const float* wt = nullptr;
  int m = 0, r = 0, s = 0, stride = 1, oh = 0, ow = 0;
  float* outT = nullptr;
};

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
  /// false: no kernel for this shape (see channel_wgrad_isa.hpp).
  bool (*channel_wgrad)(const cw_args& a) = nullptr;
  /// false: outputs not a multiple of the register width.
  bool (*channel_conv)(const cc_args& a) = nullptr;
  /// dst[cols][rows] = src[rows][cols]^T (transpose_isa.hpp).
  void (*transpose)(const float* src, int rows, int cols, float* dst) = nullptr;
};

/// The instruction set in use (null: none).
const isa_kernels* current_isa();
/// dst (planes of hp x wp, then `tail` zeros) <- src planes of h x w placed
/// at row `top`, column `left`, zeros around them.
void pad_planes(const float* src, int planes, int h, int w, float* dst, int hp, int wp, int top,
                int left, std::size_t tail);

/// wt[(c*R + r)*S + s][m] = w[m][c][r][s]: weights tap-major, output channels
/// contiguous (both forward kernels read them so).
void forward_weights(const conv_geom& g, const float* w, float* wt);
/// wt[(m*R + r')*S + s'][c] = w[m][c][R-1-r'][S-1-s']: flipped in both axes,
/// input and output channels swapped, for the input gradient as a valid
/// correlation of the padded output gradient.
void input_grad_weights(const conv_geom& g, const float* w, float* wt);

const isa_kernels* avx512_kernels();
const isa_kernels* avx2_kernels();

} // namespace gradwire::kernels::direct_conv
