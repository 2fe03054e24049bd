#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"

#include <cmath>

// Batch normalisation per channel over (N, H, W), as PyTorch's BatchNorm2d:
// biased variance to normalise, unbiased variance into the running estimate.
// Sums in double, vectorised (`omp simd` reductions: lanes of partial sums
// added at the end, a fixed order, so a run repeats itself bit for bit).

// The training passes are memory- and conversion-bound: compiled for
// AVX-512 and AVX2 as well as the baseline (clones.hpp), without FMA
// contraction (kernels/CMakeLists.txt says why). The baseline build is SSE2
// only, and its BatchNorm was 10% of a ResNet-20 step.

namespace gradwire::kernels {
namespace {

GW_CLONES void bn_forward_train(const float* x, float* y, int n, int c, int hw, const float* gamma,
                                const float* beta, float* save_mean, float* save_invstd, float* running_mean,
                                float* running_var, float momentum, float eps) {
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
    const double mean = s / m;
    const double var = std::max(0.0, ss / m - mean * mean);
    const float invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = invstd;
    if (running_mean != nullptr && running_var != nullptr) {
      const double unbiased = m > 1 ? var * m / (m - 1) : var;
      running_mean[ch] = static_cast<float>((1 - momentum) * running_mean[ch] + momentum * mean);
      running_var[ch] = static_cast<float>((1 - momentum) * running_var[ch] + momentum * unbiased);
    }
    const float a = gamma[ch] * invstd;
    const float b = beta[ch] - static_cast<float>(mean) * a;
    for (int i = 0; i < n; ++i) {
      const std::ptrdiff_t off = (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
      for (int j = 0; j < hw; ++j)
        y[off + j] = x[off + j] * a + b;
    }
  }
}

GW_CLONES void bn_backward(const float* x, const float* dy, float* dx, int n, int c, int hw, const float* gamma,
                           const float* save_mean, const float* save_invstd, float* dgamma, float* dbeta) {
  const double m = static_cast<double>(n) * hw;
  for (int ch = 0; ch < c; ++ch) {
    const float mean = save_mean[ch], invstd = save_invstd[ch];
    double sdy = 0, sdyx = 0;
    for (int i = 0; i < n; ++i) {
      const std::ptrdiff_t off = (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
#pragma omp simd reduction(+ : sdy, sdyx)
      for (int j = 0; j < hw; ++j) {
        sdy += dy[off + j];
        sdyx += static_cast<double>(dy[off + j]) * (x[off + j] - mean) * invstd;
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
        dx[off + j] = k * (dy[off + j] - mdy - xhat * mdyx);
      }
    }
  }
}

} // namespace

void cpu_backend::batchnorm_forward_train(const float* x, float* y, int n, int c, int hw,
                                          const float* gamma, const float* beta, float* save_mean,
                                          float* save_invstd, float* running_mean,
                                          float* running_var, float momentum, float eps) {
  bn_forward_train(x, y, n, c, hw, gamma, beta, save_mean, save_invstd, running_mean, running_var, momentum, eps);
}

void cpu_backend::batchnorm_forward_eval(const float* x, float* y, int n, int c, int hw,
                                         const float* gamma, const float* beta,
                                         const float* running_mean, const float* running_var,
                                         float eps) {
  for (int ch = 0; ch < c; ++ch) {
    const float a = gamma[ch] / std::sqrt(running_var[ch] + eps);
    const float b = beta[ch] - running_mean[ch] * a;
    for (int i = 0; i < n; ++i) {
      const std::ptrdiff_t off = (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
      for (int j = 0; j < hw; ++j)
        y[off + j] = x[off + j] * a + b;
    }
  }
}

void cpu_backend::batchnorm_backward(const float* x, const float* dy, float* dx, int n, int c,
                                     int hw, const float* gamma, const float* save_mean,
                                     const float* save_invstd, float* dgamma, float* dbeta) {
  bn_backward(x, dy, dx, n, c, hw, gamma, save_mean, save_invstd, dgamma, dbeta);
}

} // namespace gradwire::kernels
