// Blocked activations on the CPU, [n][c/B][h*w][B] (B = 8 or 16: oneDNN's
// nChw8c / nChw16c): the block and which convolutions take it, the layout
// change, and batch normalisation on them, for networks
// that keep a ResNet's stages blocked between oneDNN's convolutions, so
// that no activation moves to NCHW and back around each one
// (bench/RESULTS.md, "Figures behind the code").
//
// The same statistics as norm.cpp, per channel over (N, H, W) in double:
// here the B channels of a block are the vector's lanes, and each channel
// sums its values into four partial sums added in a fixed order, so a run
// repeats itself bit for bit. The bits differ from norm.cpp's, whose lanes
// are partial sums of one channel. Without FMA contraction, as norm.cpp.
#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/direct_conv.hpp" // current_isa()->transpose
#include "kernels/cpu/norm_common.hpp"
#include "kernels/cpu/onednn_conv.hpp"
#include "kernels/error.hpp"

#include <cmath>
#include <cstdint>

namespace gradwire::kernels {
namespace {

/// One channel block's plane of image i: hw pixels of B floats.
inline std::ptrdiff_t plane(int i, int blocks, int cb, int hw, int B) {
  return ((static_cast<std::ptrdiff_t>(i) * blocks + cb) * hw) * B;
}

template <int B, bool Relu>
GW_CLONES void apply_block(const float* __restrict x, float* __restrict y, int n, int blocks, int cb, int hw,
                           const float* a_in, const float* b_in) {
  float a[B], b[B];
  for (int l = 0; l < B; ++l) {
    a[l] = a_in[l];
    b[l] = b_in[l];
  }
  for (int i = 0; i < n; ++i) {
    const std::ptrdiff_t off = plane(i, blocks, cb, hw, B);
    for (int j = 0; j < hw; ++j)
      for (int l = 0; l < B; ++l) {
        const float v = x[off + j * B + l] * a[l] + b[l];
        if constexpr (Relu)
          y[off + j * B + l] = v > 0.f ? v : 0.f;
        else
          y[off + j * B + l] = v;
      }
  }
}

template <int B>
void apply(const float* x, float* y, int n, int blocks, int cb, int hw, const float* a, const float* b, bool relu) {
  if (relu)
    apply_block<B, true>(x, y, n, blocks, cb, hw, a, b);
  else
    apply_block<B, false>(x, y, n, blocks, cb, hw, a, b);
}

/// Partial sums per channel: pixel j adds into set j % U, and the sets are
/// added in a fixed order at the end (four chains of adds in flight, not one).
constexpr int U = 4;

template <int B>
inline void combine(const double (&part)[U][B], double* out) {
  for (int l = 0; l < B; ++l)
    out[l] = (part[0][l] + part[1][l]) + (part[2][l] + part[3][l]);
}

template <int B>
GW_CLONES void sums_block(const float* x, int n, int blocks, int cb, int hw, double* s, double* ss) {
  double ps[U][B] = {}, pss[U][B] = {};
  for (int i = 0; i < n; ++i) {
    const float* p = x + plane(i, blocks, cb, hw, B);
    int j = 0;
    for (; j + U <= hw; j += U)
      for (int u = 0; u < U; ++u)
        for (int l = 0; l < B; ++l) {
          const double v = p[(j + u) * B + l];
          ps[u][l] += v;
          pss[u][l] += v * v;
        }
    for (; j < hw; ++j)
      for (int l = 0; l < B; ++l) {
        const double v = p[j * B + l];
        ps[0][l] += v;
        pss[0][l] += v * v;
      }
  }
  combine<B>(ps, s);
  combine<B>(pss, ss);
}

template <int B>
void forward_train(const float* x, float* y, int n, int c, int hw, const float* gamma, const float* beta,
                   float* save_mean, float* save_invstd, float* running_mean, float* running_var, float momentum,
                   float eps, bool relu) {
  const double m = static_cast<double>(n) * hw;
  const int blocks = c / B;
  for (int cb = 0; cb < blocks; ++cb) {
    double s[B] = {}, ss[B] = {};
    sums_block<B>(x, n, blocks, cb, hw, s, ss);
    float a[B], b[B];
    for (int l = 0; l < B; ++l) {
      const auto k = bn::train_channel(s[l], ss[l], m, cb * B + l, gamma, beta, save_mean, save_invstd,
                                       running_mean, running_var, momentum, eps);
      a[l] = k.a;
      b[l] = k.b;
    }
    apply<B>(x, y, n, blocks, cb, hw, a, b, relu);
  }
}

template <int B, bool Masked>
GW_CLONES void backward_block(const float* x, const float* dy, const float* relu_y, float* dx, int n, int blocks,
                              int cb, int hw, const float* gamma, const float* save_mean, const float* save_invstd,
                              float* dgamma, float* dbeta, double m) {
  float mean[B], invstd[B];
  for (int l = 0; l < B; ++l) {
    mean[l] = save_mean[cb * B + l];
    invstd[l] = save_invstd[cb * B + l];
  }
  double psdy[U][B] = {}, psdyx[U][B] = {};
  const auto add = [&](std::ptrdiff_t px, int u) {
    for (int l = 0; l < B; ++l) {
      const std::ptrdiff_t at = px * B + l;
      const float g = bn::grad_at<Masked>(dy, relu_y, at);
      psdy[u][l] += g;
      psdyx[u][l] += static_cast<double>(g) * (x[at] - mean[l]) * invstd[l];
    }
  };
  for (int i = 0; i < n; ++i) {
    const std::ptrdiff_t first = plane(i, blocks, cb, hw, B) / B; // the plane's first pixel
    int j = 0;
    for (; j + U <= hw; j += U)
      for (int u = 0; u < U; ++u)
        add(first + j + u, u);
    for (; j < hw; ++j)
      add(first + j, 0);
  }
  double sdy[B], sdyx[B];
  combine<B>(psdy, sdy);
  combine<B>(psdyx, sdyx);
  float k[B], mdy[B], mdyx[B];
  for (int l = 0; l < B; ++l) {
    const int ch = cb * B + l;
    dgamma[ch] += static_cast<float>(sdyx[l]);
    dbeta[ch] += static_cast<float>(sdy[l]);
    k[l] = gamma[ch] * invstd[l];
    mdy[l] = static_cast<float>(sdy[l] / m);
    mdyx[l] = static_cast<float>(sdyx[l] / m);
  }
  for (int i = 0; i < n; ++i) {
    const std::ptrdiff_t off = plane(i, blocks, cb, hw, B);
    for (int j = 0; j < hw; ++j)
      for (int l = 0; l < B; ++l) {
        const std::ptrdiff_t at = off + j * B + l;
        const float xhat = (x[at] - mean[l]) * invstd[l];
        dx[at] = k[l] * (bn::grad_at<Masked>(dy, relu_y, at) - mdy[l] - xhat * mdyx[l]);
      }
  }
}

template <int B>
void backward(const float* x, const float* dy, float* dx, int n, int c, int hw, const float* gamma,
              const float* save_mean, const float* save_invstd, float* dgamma, float* dbeta, const float* relu_y) {
  const double m = static_cast<double>(n) * hw;
  for (int cb = 0; cb < c / B; ++cb)
    if (relu_y != nullptr)
      backward_block<B, true>(x, dy, relu_y, dx, n, c / B, cb, hw, gamma, save_mean, save_invstd, dgamma, dbeta, m);
    else
      backward_block<B, false>(x, dy, nullptr, dx, n, c / B, cb, hw, gamma, save_mean, save_invstd, dgamma, dbeta, m);
}

void check_block(const char* what, int c, int block) {
  check((block == 8 || block == 16) && c % block == 0, std::string(what) + ": " + std::to_string(c) +
                                                          " channels in blocks of " + std::to_string(block) +
                                                          " (blocks of 8 or 16 that divide the channels)");
}

} // namespace

int cpu_backend::activation_block() const { return onednn_conv::activation_block(); }

bool cpu_backend::conv_takes_block(int c, int k, int block) const {
  conv_geom g;
  g.c = c;
  g.k = k;
  return block > 0 && block == onednn_conv::activation_block() && c % block == 0 && k % block == 0 &&
         onednn_conv::serves(g);
}

void cpu_backend::relayout(const float* from, float* to, int n, int c, int hw, int block, bool to_blocked) {
  check_block("relayout", c, block);
  const auto* isa = direct_conv::current_isa();
  const std::ptrdiff_t per = static_cast<std::ptrdiff_t>(block) * hw;
  for (std::ptrdiff_t k = 0; k < static_cast<std::ptrdiff_t>(n) * (c / block); ++k) {
    const float* src = from + k * per;
    float* dst = to + k * per;
    const int rows = to_blocked ? block : hw, cols = to_blocked ? hw : block; // src is rows x cols
    if (isa != nullptr)
      isa->transpose(src, rows, cols, dst);
    else
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
          dst[static_cast<std::ptrdiff_t>(j) * rows + i] = src[static_cast<std::ptrdiff_t>(i) * cols + j];
  }
}

void cpu_backend::batchnorm_forward_train_blocked(const float* x, float* y, int n, int c, int hw, int block,
                                                  const float* gamma, const float* beta, float* save_mean,
                                                  float* save_invstd, float* running_mean, float* running_var,
                                                  float momentum, float eps, bool relu) {
  check_block("batchnorm", c, block);
  (block == 8 ? forward_train<8> : forward_train<16>)(x, y, n, c, hw, gamma, beta, save_mean, save_invstd,
                                                      running_mean, running_var, momentum, eps, relu);
}

void cpu_backend::batchnorm_forward_eval_blocked(const float* x, float* y, int n, int c, int hw, int block,
                                                 const float* gamma, const float* beta, const float* running_mean,
                                                 const float* running_var, float eps, bool relu) {
  check_block("batchnorm", c, block);
  for (int cb = 0; cb < c / block; ++cb) {
    float a[16], b[16];
    for (int l = 0; l < block; ++l) {
      const auto k = bn::eval_channel(cb * block + l, gamma, beta, running_mean, running_var, eps);
      a[l] = k.a;
      b[l] = k.b;
    }
    (block == 8 ? apply<8> : apply<16>)(x, y, n, c / block, cb, hw, a, b, relu);
  }
}

void cpu_backend::batchnorm_backward_blocked(const float* x, const float* dy, float* dx, int n, int c, int hw,
                                             int block, const float* gamma, const float* save_mean,
                                             const float* save_invstd, float* dgamma, float* dbeta,
                                             const float* relu_y) {
  check_block("batchnorm", c, block);
  (block == 8 ? backward<8> : backward<16>)(x, dy, dx, n, c, hw, gamma, save_mean, save_invstd, dgamma, dbeta,
                                            relu_y);
}

} // namespace gradwire::kernels
