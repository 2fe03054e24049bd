#include "kernels/cpu/cpu_backend.hpp"

#include <cstring>

// Convolution as im2col + GEMM, one image at a time. For image i:
//   cols[C*R*S, OH*OW]  = im2col(x_i)
//   y_i[K, OH*OW]       = W[K, C*R*S] * cols
// Backward recomputes cols (cheaper in memory than caching them for the
// whole batch, which for ResNet-20 at batch 128 would be ~1.4 GB):
//   dW[K, CRS]         += dy_i * cols^T
//   dcols[CRS, OH*OW]   = W^T * dy_i ;  dx_i = col2im(dcols)
// The workspace holds cols and dcols for one image.

namespace gradwire::kernels {
namespace {

void im2col(const conv_geom& g, const float* x, float* cols) {
  const int oh = g.out_h(), ow = g.out_w();
  for (int c = 0; c < g.c; ++c)
    for (int r = 0; r < g.r; ++r)
      for (int s = 0; s < g.s; ++s) {
        float* row = cols + ((static_cast<std::ptrdiff_t>(c) * g.r + r) * g.s + s) * oh * ow;
        const float* plane = x + static_cast<std::ptrdiff_t>(c) * g.h * g.w;
        for (int y = 0; y < oh; ++y) {
          const int iy = y * g.stride - g.pad + r;
          float* out = row + y * ow;
          if (iy < 0 || iy >= g.h) {
            std::memset(out, 0, sizeof(float) * static_cast<std::size_t>(ow));
            continue;
          }
          const float* in = plane + static_cast<std::ptrdiff_t>(iy) * g.w;
          for (int xo = 0; xo < ow; ++xo) {
            const int ix = xo * g.stride - g.pad + s;
            out[xo] = (ix >= 0 && ix < g.w) ? in[ix] : 0.f;
          }
        }
      }
}

void col2im(const conv_geom& g, const float* cols, float* x) {
  const int oh = g.out_h(), ow = g.out_w();
  std::memset(x, 0, sizeof(float) * static_cast<std::size_t>(g.c) * g.h * g.w);
  for (int c = 0; c < g.c; ++c)
    for (int r = 0; r < g.r; ++r)
      for (int s = 0; s < g.s; ++s) {
        const float* row = cols + ((static_cast<std::ptrdiff_t>(c) * g.r + r) * g.s + s) * oh * ow;
        float* plane = x + static_cast<std::ptrdiff_t>(c) * g.h * g.w;
        for (int y = 0; y < oh; ++y) {
          const int iy = y * g.stride - g.pad + r;
          if (iy < 0 || iy >= g.h)
            continue;
          float* out = plane + static_cast<std::ptrdiff_t>(iy) * g.w;
          const float* in = row + y * ow;
          for (int xo = 0; xo < ow; ++xo) {
            const int ix = xo * g.stride - g.pad + s;
            if (ix >= 0 && ix < g.w)
              out[ix] += in[xo];
          }
        }
      }
}

bool is_pointwise(const conv_geom& g) { return g.r == 1 && g.s == 1 && g.stride == 1 && g.pad == 0; }

} // namespace

std::size_t cpu_backend::conv2d_workspace_bytes(const conv_geom& g) {
  const std::size_t crs = static_cast<std::size_t>(g.c) * g.r * g.s;
  const std::size_t pix = static_cast<std::size_t>(g.out_h()) * g.out_w();
  return is_pointwise(g) ? 0 : 2 * crs * pix * sizeof(float);
}

void cpu_backend::conv2d_forward(const conv_geom& g, const float* x, const float* w, float* y,
                                 void* workspace) {
  const int crs = g.c * g.r * g.s;
  const int pix = g.out_h() * g.out_w();
  auto* cols = static_cast<float*>(workspace);
  for (int i = 0; i < g.n; ++i) {
    const float* xi = x + static_cast<std::ptrdiff_t>(i) * g.c * g.h * g.w;
    float* yi = y + static_cast<std::ptrdiff_t>(i) * g.k * pix;
    const float* src = xi;
    if (!is_pointwise(g)) {
      im2col(g, xi, cols);
      src = cols;
    }
    gemm(false, false, g.k, pix, crs, 1.f, w, crs, src, pix, 0.f, yi, pix);
  }
}

void cpu_backend::conv2d_backward(const conv_geom& g, const float* x, const float* w,
                                  const float* dy, float* dx, float* dw, void* workspace) {
  const int crs = g.c * g.r * g.s;
  const int pix = g.out_h() * g.out_w();
  const bool pw = is_pointwise(g);
  auto* cols = static_cast<float*>(workspace);
  float* dcols = pw ? nullptr : cols + static_cast<std::ptrdiff_t>(crs) * pix;
  for (int i = 0; i < g.n; ++i) {
    const float* xi = x + static_cast<std::ptrdiff_t>(i) * g.c * g.h * g.w;
    const float* dyi = dy + static_cast<std::ptrdiff_t>(i) * g.k * pix;
    const float* src = xi;
    if (!pw) {
      im2col(g, xi, cols);
      src = cols;
    }
    gemm(false, true, g.k, crs, pix, 1.f, dyi, pix, src, pix, 1.f, dw, crs);
    if (dx == nullptr)
      continue;
    float* dxi = dx + static_cast<std::ptrdiff_t>(i) * g.c * g.h * g.w;
    if (pw) {
      gemm(true, false, crs, pix, g.k, 1.f, w, crs, dyi, pix, 0.f, dxi, pix);
    } else {
      gemm(true, false, crs, pix, g.k, 1.f, w, crs, dyi, pix, 0.f, dcols, pix);
      col2im(g, dcols, dxi);
    }
  }
}

} // namespace gradwire::kernels
