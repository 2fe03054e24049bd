// The CPU transformer passes besides attention: LayerNorm, exact GELU and
// the token and position embeddings, written as PyTorch defines them
// (biased variance in LayerNorm, erf in GELU). Row statistics are summed in
// double, in a fixed order, so a run repeats itself bit for bit.
#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/dropout_mask.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace gradwire::kernels {

namespace {

GW_CLONES void layernorm_row(const float* x, float* y, float* mean, float* rstd, const float* w, const float* b,
                             int cols, float eps) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < cols; ++j)
    s += x[j];
  const double mu = s / cols;
  double ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int j = 0; j < cols; ++j) {
    const double c = x[j] - mu;
    ss += c * c;
  }
  const float m = static_cast<float>(mu);
  const float r = static_cast<float>(1.0 / std::sqrt(ss / cols + eps));
  for (int j = 0; j < cols; ++j)
    y[j] = (x[j] - m) * r * w[j] + b[j];
  *mean = m;
  *rstd = r;
}

GW_CLONES void layernorm_row_backward(const float* x, const float* dy, float mean, float rstd, const float* w,
                                      float* dx, float* dw, float* db, int cols) {
  // dxhat = dy * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
  for (int j = 0; j < cols; ++j) {
    const float xhat = (x[j] - mean) * rstd;
    const float g = dy[j] * w[j];
    s1 += g;
    s2 += static_cast<double>(g) * xhat;
  }
  const float m1 = static_cast<float>(s1 / cols), m2 = static_cast<float>(s2 / cols);
  for (int j = 0; j < cols; ++j) {
    const float xhat = (x[j] - mean) * rstd;
    dw[j] += dy[j] * xhat;
    db[j] += dy[j];
    dx[j] = rstd * (dy[j] * w[j] - m1 - xhat * m2);
  }
}

constexpr float inv_sqrt2 = 0.70710678118654752f, inv_sqrt_2pi = 0.39894228040143268f;

GW_CLONES void gelu_fwd(const float* x, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const cpu::v8f v = cpu::load8(x + i);
    cpu::store8(y + i, 0.5f * v * (1.f + cpu::fast_erf8(v * inv_sqrt2)));
  }
  for (; i < n; ++i)
    y[i] = 0.5f * x[i] * (1.f + cpu::fast_erf(x[i] * inv_sqrt2));
}

/// dx = dy * GELU'(x), GELU'(x) = Phi(x) + x phi(x); dx may be dy.
GW_CLONES void gelu_bwd(const float* x, const float* dy, float* dx, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const cpu::v8f v = cpu::load8(x + i);
    const cpu::v8f d = 0.5f * (1.f + cpu::fast_erf8(v * inv_sqrt2)) + v * inv_sqrt_2pi * cpu::fast_exp8(-0.5f * v * v);
    cpu::store8(dx + i, cpu::load8(dy + i) * d);
  }
  for (; i < n; ++i) {
    const float v = x[i];
    dx[i] = dy[i] * (0.5f * (1.f + cpu::fast_erf(v * inv_sqrt2)) + v * inv_sqrt_2pi * cpu::fast_exp(-0.5f * v * v));
  }
}

int token_at(const float* tokens, std::ptrdiff_t i, int vocab) {
  const float t = tokens[i];
  GW_CHECK(t >= 0.f && t < static_cast<float>(vocab) && t == std::floor(t),
           "embedding: token " + std::to_string(t) + " at position " + std::to_string(i) +
             " is not an integer in [0, " + std::to_string(vocab) + ") (model.vocab)");
  return static_cast<int>(t);
}

} // namespace

void cpu_backend::layernorm_forward(const float* x, float* y, float* mean, float* rstd, const float* w,
                                    const float* b, int rows, int cols, float eps) {
  for (int i = 0; i < rows; ++i) {
    const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(i) * cols;
    layernorm_row(x + o, y + o, mean + i, rstd + i, w, b, cols, eps);
  }
}

void cpu_backend::layernorm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                                     const float* w, float* dx, float* dw, float* db, int rows, int cols) {
  for (int i = 0; i < rows; ++i) {
    const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(i) * cols;
    layernorm_row_backward(x + o, dy + o, mean[i], rstd[i], w, dx + o, dw, db, cols);
  }
}

void cpu_backend::dropout(float* x, int rows, int cols, float p, std::uint64_t key, std::int64_t first_row) {
  check_dropout(p, "dropout");
  const dropout_mask mask = make_dropout_mask(p, key);
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  const auto first = static_cast<std::uint64_t>(first_row) * static_cast<std::uint64_t>(cols);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = mask.keeps(first + i) ? x[i] * mask.keep_scale : 0.f;
}

void cpu_backend::gelu_forward(const float* x, float* y, std::size_t n) { gelu_fwd(x, y, n); }

void cpu_backend::gelu_backward(const float* x, const float* dy, float* dx, std::size_t n) { gelu_bwd(x, dy, dx, n); }

void cpu_backend::embedding_forward(const float* tokens, const float* wte, const float* wpe, float* h, int batch,
                                    int time, int d, int vocab) {
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < time; ++t) {
      const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(b) * time + t;
      const float* e = wte + static_cast<std::ptrdiff_t>(token_at(tokens, at, vocab)) * d;
      const float* p = wpe + static_cast<std::ptrdiff_t>(t) * d;
      float* out = h + at * d;
      for (int j = 0; j < d; ++j)
        out[j] = e[j] + p[j];
    }
}

void cpu_backend::embedding_backward(const float* tokens, const float* dh, float* dwte, float* dwpe, int batch,
                                     int time, int d, int) {
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < time; ++t) {
      const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(b) * time + t;
      const float* g = dh + at * d;
      float* e = dwte + static_cast<std::ptrdiff_t>(tokens[at]) * d; // checked by the forward pass
      float* p = dwpe + static_cast<std::ptrdiff_t>(t) * d;
      for (int j = 0; j < d; ++j) {
        e[j] += g[j];
        p[j] += g[j];
      }
    }
}

} // namespace gradwire::kernels
