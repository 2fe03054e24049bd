#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/direct_conv.hpp"
#include "kernels/cpu/onednn_conv.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

// Stride-1 convolutions of small images (rows of at most 32 pixels: LeNet-5,
// ResNet-20's stages) take the direct kernels of direct_conv.hpp when the
// CPU has AVX2+FMA or AVX-512 (bench/RESULTS.md, "Measured effects"). The rest:
// convolution as im2col + GEMM, one image at a time. For image i:
//   cols[C*R*S, OH*OW]  = im2col(x_i)
//   y_i[K, OH*OW]       = W[K, C*R*S] * cols
//   dW[K, CRS]         += dy_i * cols^T
//   dcols[CRS, OH*OW]   = W^T * dy_i ;  dx_i = col2im(dcols)
// When the whole batch's columns fit in cache_limit bytes, forward keeps
// every image's columns in the workspace and backward reuses them;
// otherwise backward recomputes them image by image (one image's columns
// stay in L1/L2). Workspace: cols of N images (or 1), then dcols of one.
// Measured, LeNet-5 batch 64, one thread, A/B alternating runs (min/median
// ms a step): limit 16 MB (both convs cached) 7.58/10.18, 4 MB (only conv2's
// 3.8 MB) 7.42/8.06, 0 (none) 6.84/9.50: within this VM's noise, so the
// middle setting is kept. ResNet-20's first stage (~38 MB) always recomputes.
// One GEMM over the whole batch (COLS[CRS, N*PIX]) is slower: with M = 6
// output channels OpenBLAS spends its time packing COLS.

namespace gradwire::kernels {
namespace {

/// Output columns [lo, hi) whose input column xo*stride - pad + s lies inside
/// the image; the rest read padding.
inline void valid_range(const conv_geom& g, int s, int ow, int& lo, int& hi) {
  // ix = xo*stride - pad + s >= 0  <=>  xo >= ceil((pad - s) / stride)
  lo = std::max(0, (g.pad - s + g.stride - 1) / g.stride);
  // ix < w  <=>  xo <= (w - 1 + pad - s) / stride
  const int last = g.w - 1 + g.pad - s;
  hi = last < 0 ? 0 : std::min(ow, last / g.stride + 1);
  if (g.pad - s < 0)
    lo = 0;
  if (hi < lo)
    hi = lo;
}

/// cols row j starts at cols + j * ld (ld = OH*OW for one image, N*OH*OW when
/// the batch shares one matrix).
/// im2col for stride 1 and "same" width (ow == w, LeNet's first layer):
/// each tap's rows are one contiguous run of the input shifted by
/// (r - pad) rows and (s - pad) columns, so it is one memcpy plus zeroing
/// the |s - pad| edge columns of each row, instead of a loop per row.
void im2col_same_width(const conv_geom& g, const float* x, float* cols, std::ptrdiff_t ld) {
  const int oh = g.out_h(), ow = g.out_w();
  const std::ptrdiff_t plane_len = static_cast<std::ptrdiff_t>(g.h) * g.w;
  for (int c = 0; c < g.c; ++c)
    for (int r = 0; r < g.r; ++r)
      for (int s = 0; s < g.s; ++s) {
        float* row = cols + ((static_cast<std::ptrdiff_t>(c) * g.r + r) * g.s + s) * ld;
        const float* plane = x + static_cast<std::ptrdiff_t>(c) * plane_len;
        const int shift = s - g.pad;
        const int y0 = std::max(0, g.pad - r), y1 = std::min(oh, g.h + g.pad - r);
        if (y1 <= y0) {
          std::memset(row, 0, sizeof(float) * static_cast<std::size_t>(oh) * ow);
          continue;
        }
        std::memset(row, 0, sizeof(float) * static_cast<std::size_t>(y0) * ow);
        std::memset(row + static_cast<std::ptrdiff_t>(y1) * ow, 0, sizeof(float) * static_cast<std::size_t>(oh - y1) * ow);
        // Output [y0*ow, y1*ow) <- input from (y0 + r - pad) * w + shift, clipped to the plane.
        std::ptrdiff_t begin = 0, end = static_cast<std::ptrdiff_t>(y1 - y0) * ow;
        const std::ptrdiff_t base = static_cast<std::ptrdiff_t>(y0 + r - g.pad) * g.w + shift;
        begin = std::max(begin, -base);
        end = std::min(end, plane_len - base);
        float* out = row + static_cast<std::ptrdiff_t>(y0) * ow;
        if (end > begin)
          std::memcpy(out + begin, plane + base + begin, sizeof(float) * static_cast<std::size_t>(end - begin));
        // Columns that read across a row edge (and the clipped ends) are padding.
        for (int y = 0; y < y1 - y0; ++y) {
          float* o = out + static_cast<std::ptrdiff_t>(y) * ow;
          for (int xo = 0; xo < -shift; ++xo)
            o[xo] = 0.f;
          for (int xo = ow - shift; xo < ow; ++xo)
            o[xo] = 0.f;
        }
      }
}

void im2col(const conv_geom& g, const float* x, float* cols, std::ptrdiff_t ld) {
  const int oh = g.out_h(), ow = g.out_w();
  if (g.stride == 1 && ow == g.w && ld == static_cast<std::ptrdiff_t>(oh) * ow) {
    im2col_same_width(g, x, cols, ld);
    return;
  }
  for (int c = 0; c < g.c; ++c)
    for (int r = 0; r < g.r; ++r)
      for (int s = 0; s < g.s; ++s) {
        float* row = cols + ((static_cast<std::ptrdiff_t>(c) * g.r + r) * g.s + s) * ld;
        const float* plane = x + static_cast<std::ptrdiff_t>(c) * g.h * g.w;
        int lo, hi;
        valid_range(g, s, ow, lo, hi);
        for (int y = 0; y < oh; ++y) {
          const int iy = y * g.stride - g.pad + r;
          float* __restrict out = row + y * ow;
          if (iy < 0 || iy >= g.h) {
            std::memset(out, 0, sizeof(float) * static_cast<std::size_t>(ow));
            continue;
          }
          const float* __restrict in = plane + static_cast<std::ptrdiff_t>(iy) * g.w - g.pad + s;
          for (int xo = 0; xo < lo; ++xo)
            out[xo] = 0.f;
          if (g.stride == 1) // rows are short (5-32): a loop beats a memcpy call
            for (int xo = lo; xo < hi; ++xo)
              out[xo] = in[xo];
          else
            for (int xo = lo; xo < hi; ++xo)
              out[xo] = in[xo * g.stride];
          for (int xo = hi; xo < ow; ++xo)
            out[xo] = 0.f;
        }
      }
}

void col2im(const conv_geom& g, const float* cols, float* x, std::ptrdiff_t ld) {
  const int oh = g.out_h(), ow = g.out_w();
  std::memset(x, 0, sizeof(float) * static_cast<std::size_t>(g.c) * g.h * g.w);
  for (int c = 0; c < g.c; ++c)
    for (int r = 0; r < g.r; ++r)
      for (int s = 0; s < g.s; ++s) {
        const float* row = cols + ((static_cast<std::ptrdiff_t>(c) * g.r + r) * g.s + s) * ld;
        float* plane = x + static_cast<std::ptrdiff_t>(c) * g.h * g.w;
        int lo, hi;
        valid_range(g, s, ow, lo, hi);
        for (int y = 0; y < oh; ++y) {
          const int iy = y * g.stride - g.pad + r;
          if (iy < 0 || iy >= g.h)
            continue;
          float* __restrict out = plane + static_cast<std::ptrdiff_t>(iy) * g.w - g.pad + s;
          const float* __restrict in = row + y * ow;
          if (g.stride == 1)
            for (int xo = lo; xo < hi; ++xo)
              out[xo] += in[xo];
          else
            for (int xo = lo; xo < hi; ++xo)
              out[xo * g.stride] += in[xo];
        }
      }
}

bool is_pointwise(const conv_geom& g) { return g.r == 1 && g.s == 1 && g.stride == 1 && g.pad == 0; }

constexpr std::size_t cache_limit = 4u << 20;

std::size_t cols_floats(const conv_geom& g) {
  return static_cast<std::size_t>(g.c) * g.r * g.s * g.out_h() * g.out_w();
}

/// Whether forward runs im2col + GEMM (no faster kernel applies).
bool im2col_forward(const conv_geom& g) {
  return !direct_conv::channel_forward_applies(g) && !direct_conv::applies(g);
}

/// Whether an im2col forward keeps every image's columns for backward.
bool caches_cols(const conv_geom& g) {
  return im2col_forward(g) && !is_pointwise(g) &&
         cols_floats(g) * static_cast<std::size_t>(g.n) * sizeof(float) <= cache_limit;
}

constexpr std::size_t round64(std::size_t b) { return (b + 63) / 64 * 64; }

/// The row kernels' or im2col's workspace; the channel kernels' follow it.
std::size_t path_workspace_bytes(const conv_geom& g) {
  if (direct_conv::applies(g))
    return round64(direct_conv::workspace_bytes(g));
  if (is_pointwise(g))
    return 0;
  const std::size_t images = caches_cols(g) ? static_cast<std::size_t>(g.n) : 1;
  return round64((images + 1) * cols_floats(g) * sizeof(float));
}

std::size_t channel_conv_bytes(const conv_geom& g) {
  return direct_conv::channel_forward_applies(g) || direct_conv::channel_input_grad_applies(g)
           ? round64(direct_conv::channel_conv_workspace_bytes(g))
           : 0;
}

float* at(void* workspace, std::size_t bytes) {
  return reinterpret_cast<float*>(static_cast<char*>(workspace) + bytes);
}

} // namespace

// Which kernel runs each pass, measured per layer (bench/conv_libs.cpp,
// bench/RESULTS.md "Convolutions"): the channel-vectorised kernels where they
// apply (3x3 and 5x5, channels a multiple of the register width), else the
// row-vectorised direct kernels, else im2col + GEMM.
// Convolutions of 16 channels and more go to oneDNN where it is built in
// (onednn_conv.hpp: its blocked primitives, reorders included, measured faster).
namespace {
/// A convolution on blocked activations that oneDNN does not serve (it was
/// turned off after a network chose its layouts): NCHW copies of them,
/// around gradwire's own kernels. Correct, not fast.
struct nchw_copies {
  std::vector<float> x, y;
  const float* in(cpu_backend& be, const conv_geom& g, const float* blocked) {
    x.resize(static_cast<std::size_t>(g.n) * g.c * g.h * g.w);
    be.relayout(blocked, x.data(), g.n, g.c, g.h * g.w, g.block, false);
    return x.data();
  }
  float* out(std::size_t floats) {
    y.resize(floats);
    return y.data();
  }
};
thread_local nchw_copies fallback;
thread_local std::vector<float> fallback_dy;

conv_geom unblocked(conv_geom g) {
  g.block = 0;
  return g;
}
} // namespace

std::size_t cpu_backend::conv2d_workspace_bytes(const conv_geom& g) {
  if (onednn_conv::serves(g))
    return onednn_conv::workspace_bytes(g);
  if (g.block > 0)
    return conv2d_workspace_bytes(unblocked(g));
  return path_workspace_bytes(g) + channel_conv_bytes(g) +
         (direct_conv::channel_wgrad_applies(g) ? direct_conv::channel_wgrad_workspace_bytes(g) : 0);
}

void cpu_backend::conv2d_forward(const conv_geom& g, const float* x, const float* w, float* y,
                                 void* workspace) {
  if (onednn_conv::serves(g))
    return onednn_conv::forward(g, x, w, y, workspace);
  if (g.block > 0) {
    const auto u = unblocked(g);
    const auto out = static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
    float* yn = fallback.out(out);
    conv2d_forward(u, fallback.in(*this, g, x), w, yn, workspace);
    relayout(yn, y, g.n, g.k, g.out_h() * g.out_w(), g.block, true);
    return;
  }
  if (direct_conv::channel_forward_applies(g))
    return direct_conv::channel_forward(g, x, w, y, at(workspace, path_workspace_bytes(g)));
  if (direct_conv::applies(g))
    return direct_conv::forward(g, x, w, y, static_cast<float*>(workspace));
  const int crs = g.c * g.r * g.s;
  const int pix = g.out_h() * g.out_w();
  const std::ptrdiff_t in_img = static_cast<std::ptrdiff_t>(g.c) * g.h * g.w;
  const bool cache = caches_cols(g);
  for (int i = 0; i < g.n; ++i) {
    const float* src = x + i * in_img;
    if (!is_pointwise(g)) {
      float* cols = static_cast<float*>(workspace) + (cache ? static_cast<std::size_t>(i) * cols_floats(g) : 0);
      im2col(g, src, cols, pix);
      src = cols;
    }
    gemm(false, false, g.k, pix, crs, 1.f, w, crs, src, pix, 0.f, y + static_cast<std::ptrdiff_t>(i) * g.k * pix, pix);
  }
}

void cpu_backend::conv2d_backward(const conv_geom& g, const float* x, const float* w,
                                  const float* dy, float* dx, float* dw, void* workspace) {
  if (onednn_conv::serves(g))
    return onednn_conv::backward(g, x, w, dy, dx, dw, workspace);
  if (g.block > 0) {
    const auto u = unblocked(g);
    const int opix = g.out_h() * g.out_w();
    fallback_dy.resize(static_cast<std::size_t>(g.n) * g.k * opix);
    relayout(dy, fallback_dy.data(), g.n, g.k, opix, g.block, false);
    const float* xn = fallback.in(*this, g, x);
    float* dxn = dx != nullptr ? fallback.out(static_cast<std::size_t>(g.n) * g.c * g.h * g.w) : nullptr;
    conv2d_backward(u, xn, w, fallback_dy.data(), dxn, dw, workspace);
    if (dx != nullptr)
      relayout(dxn, dx, g.n, g.c, g.h * g.w, g.block, true);
    return;
  }
  // The weight gradient vectorised along output channels where it applies
  // (bench/RESULTS.md, "Convolutions"); the paths below then skip theirs.
  if (direct_conv::channel_wgrad_applies(g)) {
    direct_conv::channel_wgrad(g, x, dy, dw, at(workspace, path_workspace_bytes(g) + channel_conv_bytes(g)));
    dw = nullptr;
  }
  if (dx != nullptr && direct_conv::channel_input_grad_applies(g)) {
    direct_conv::channel_input_grad(g, w, dy, dx, at(workspace, path_workspace_bytes(g)));
    dx = nullptr;
  }
  if (dx == nullptr && dw == nullptr)
    return;
  if (direct_conv::applies(g))
    return direct_conv::backward(g, x, w, dy, dx, dw, static_cast<float*>(workspace));
  const int crs = g.c * g.r * g.s;
  const int pix = g.out_h() * g.out_w();
  const std::ptrdiff_t in_img = static_cast<std::ptrdiff_t>(g.c) * g.h * g.w;
  const bool pw = is_pointwise(g), cache = caches_cols(g);
  auto* ws = static_cast<float*>(workspace);
  float* dcols = pw ? nullptr : ws + (cache ? static_cast<std::size_t>(g.n) : 1) * cols_floats(g);
  for (int i = 0; i < g.n; ++i) {
    const float* src = x + i * in_img;
    const float* dyi = dy + static_cast<std::ptrdiff_t>(i) * g.k * pix;
    if (!pw && dw != nullptr) {
      float* cols = ws + (cache ? static_cast<std::size_t>(i) * cols_floats(g) : 0);
      if (!cache)
        im2col(g, src, cols, pix);
      src = cols;
    }
    if (dw != nullptr)
      gemm(false, true, g.k, crs, pix, 1.f, dyi, pix, src, pix, 1.f, dw, crs);
    if (dx == nullptr)
      continue;
    float* dxi = dx + i * in_img;
    if (pw) {
      gemm(true, false, crs, pix, g.k, 1.f, w, crs, dyi, pix, 0.f, dxi, pix);
    } else {
      gemm(true, false, crs, pix, g.k, 1.f, w, crs, dyi, pix, 0.f, dcols, pix);
      col2im(g, dcols, dxi, pix);
    }
  }
}

} // namespace gradwire::kernels
