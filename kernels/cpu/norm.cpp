#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/norm_common.hpp"

#include <cmath>
#include <cstdint>

// Batch normalisation per channel over (N, H, W), as PyTorch's BatchNorm2d:
// biased variance to normalise, unbiased variance into the running estimate.
// Sums in double, vectorised (`omp simd` reductions: lanes of partial sums
// added at the end, a fixed order, so a run repeats itself bit for bit).

// The training passes are memory- and conversion-bound: compiled for
// AVX-512 and AVX2 as well as the baseline (clones.hpp), without FMA
// contraction (kernels/CMakeLists.txt says why). The baseline build is SSE2
// only, which left BatchNorm a large share of a ResNet-20 step
// (bench/RESULTS.md, "Figures behind the code").

namespace gradwire::kernels {
namespace {

/// y = x * a + b over one channel's plane of each image, rectified when asked.
GW_CLONES void bn_apply(const float* x, float* y, int n, int c, int ch, int hw, float a, float b, bool relu) {
  for (int i = 0; i < n; ++i) {
    const std::ptrdiff_t off = (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
    if (relu) {
      for (int j = 0; j < hw; ++j) {
        const float v = x[off + j] * a + b;
        y[off + j] = v > 0.f ? v : 0.f;
      }
    } else {
      for (int j = 0; j < hw; ++j)
        y[off + j] = x[off + j] * a + b;
    }
  }
}

GW_CLONES void bn_forward_train(const float* x, float* y, int n, int c, int hw, const float* gamma,
                                const float* beta, float* save_mean, float* save_invstd, float* running_mean,
                                float* running_var, float momentum, float eps, bool relu) {
  const double m = static_cast<double>(n) * hw;
  for (int ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; ++i) {
      const float* p = x + (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
#pragma omp simd reduction(+ : s, ss)
      for (int j = 0; j < hw; ++j) {
        s += p[j];
        ss += static_cast<double>(p[j]) * p[j];
      }
    }
    const auto k = bn::train_channel(s, ss, m, ch, gamma, beta, save_mean, save_invstd, running_mean, running_var,
                                     momentum, eps);
    bn_apply(x, y, n, c, ch, hw, k.a, k.b, relu);
  }
}

template <bool Masked>
GW_CLONES void bn_backward(const float* x, const float* dy, const float* relu_y, float* dx, int n, int c, int hw,
                           const float* gamma, const float* save_mean, const float* save_invstd, float* dgamma,
                           float* dbeta) {
  const double m = static_cast<double>(n) * hw;
  for (int ch = 0; ch < c; ++ch) {
    const float mean = save_mean[ch], invstd = save_invstd[ch];
    double sdy = 0, sdyx = 0;
    for (int i = 0; i < n; ++i) {
      const std::ptrdiff_t off = (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
#pragma omp simd reduction(+ : sdy, sdyx)
      for (int j = 0; j < hw; ++j) {
        const float g = bn::grad_at<Masked>(dy, relu_y, off + j);
        sdy += g;
        sdyx += static_cast<double>(g) * (x[off + j] - mean) * invstd;
      }
    }
    dgamma[ch] += static_cast<float>(sdyx);
    dbeta[ch] += static_cast<float>(sdy);
    const float k = gamma[ch] * invstd;
    const float mdy = static_cast<float>(sdy / m), mdyx = static_cast<float>(sdyx / m);
    for (int i = 0; i < n; ++i) {
      const std::ptrdiff_t off = (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
      for (int j = 0; j < hw; ++j) {
        const float xhat = (x[off + j] - mean) * invstd;
        dx[off + j] = k * (bn::grad_at<Masked>(dy, relu_y, off + j) - mdy - xhat * mdyx);
      }
    }
  }
}

} // namespace

void cpu_backend::batchnorm_forward_train(const float* x, float* y, int n, int c, int hw,
                                          const float* gamma, const float* beta, float* save_mean,
                                          float* save_invstd, float* running_mean,
                                          float* running_var, float momentum, float eps, bool relu) {
  bn_forward_train(x, y, n, c, hw, gamma, beta, save_mean, save_invstd, running_mean, running_var, momentum, eps,
                   relu);
}

void cpu_backend::batchnorm_forward_eval(const float* x, float* y, int n, int c, int hw,
                                         const float* gamma, const float* beta,
                                         const float* running_mean, const float* running_var,
                                         float eps, bool relu) {
  for (int ch = 0; ch < c; ++ch) {
    const auto k = bn::eval_channel(ch, gamma, beta, running_mean, running_var, eps);
    bn_apply(x, y, n, c, ch, hw, k.a, k.b, relu);
  }
}

void cpu_backend::batchnorm_backward(const float* x, const float* dy, float* dx, int n, int c,
                                     int hw, const float* gamma, const float* save_mean,
                                     const float* save_invstd, float* dgamma, float* dbeta,
                                     const float* relu_y) {
  if (relu_y != nullptr)
    bn_backward<true>(x, dy, relu_y, dx, n, c, hw, gamma, save_mean, save_invstd, dgamma, dbeta);
  else
    bn_backward<false>(x, dy, nullptr, dx, n, c, hw, gamma, save_mean, save_invstd, dgamma, dbeta);
}

} // namespace gradwire::kernels
