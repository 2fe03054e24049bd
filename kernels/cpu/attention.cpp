// Causal self-attention on the CPU, FlashAttention's way: for each query the
// keys are taken in tiles of `key_tile`, and a running maximum and sum (an
// online softmax) rescale what was accumulated so far, so the time x time
// score matrix is never stored. Backward recomputes each score from q, k and
// the row's log-sum-exp (FlashAttention-2), with D_i = dy_i . y_i.
#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gradwire::kernels {

namespace {

constexpr int key_tile = 64;

GW_CLONES float dot(const float* a, const float* b, int n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

GW_CLONES void axpy_n(float* y, float a, const float* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i)
    y[i] += a * x[i];
}

/// Where head `h`'s q (part 0), k (1) or v (2) of row `row` starts in qkv.
struct head_view {
  int d, hd, h;
  std::ptrdiff_t at(std::ptrdiff_t row, int part) const {
    return row * 3 * d + static_cast<std::ptrdiff_t>(part) * d + static_cast<std::ptrdiff_t>(h) * hd;
  }
};

/// One head of one sequence: rows [row0, row0 + time) of qkv and y.
void forward_head(const float* qkv, float* y, float* lse, std::ptrdiff_t row0, int time, const head_view& hv,
                  std::vector<float>& acc) {
  const int hd = hv.hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  float s[key_tile];
  for (int i = 0; i < time; ++i) {
    const float* q = qkv + hv.at(row0 + i, 0);
    float m = -std::numeric_limits<float>::infinity(), l = 0.f;
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int j0 = 0; j0 <= i; j0 += key_tile) {
      const int j1 = std::min(i + 1, j0 + key_tile);
      float mt = m;
      for (int j = j0; j < j1; ++j) {
        s[j - j0] = dot(q, qkv + hv.at(row0 + j, 1), hd) * scale;
        mt = std::max(mt, s[j - j0]);
      }
      const float corr = std::exp(m - mt); // 0 on the first tile (m = -inf)
      l *= corr;
      for (int c = 0; c < hd; ++c)
        acc[static_cast<std::size_t>(c)] *= corr;
      for (int j = j0; j < j1; ++j) {
        const float p = std::exp(s[j - j0] - mt);
        l += p;
        axpy_n(acc.data(), p, qkv + hv.at(row0 + j, 2), hd);
      }
      m = mt;
    }
    float* out = y + (row0 + i) * hv.d + static_cast<std::ptrdiff_t>(hv.h) * hd;
    const float inv = 1.f / l;
    for (int c = 0; c < hd; ++c)
      out[c] = acc[static_cast<std::size_t>(c)] * inv;
    lse[i] = m + std::log(l);
  }
}

void backward_head(const float* qkv, const float* y, const float* dy, const float* lse, float* dqkv,
                   std::ptrdiff_t row0, int time, const head_view& hv) {
  const int hd = hv.hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const auto yat = [&](std::ptrdiff_t row) { return row * hv.d + static_cast<std::ptrdiff_t>(hv.h) * hd; };
  for (int i = 0; i < time; ++i)
    for (int part = 0; part < 3; ++part)
      std::fill_n(dqkv + hv.at(row0 + i, part), hd, 0.f);
  for (int i = 0; i < time; ++i) {
    const float* q = qkv + hv.at(row0 + i, 0);
    const float* g = dy + yat(row0 + i);
    const float di = dot(g, y + yat(row0 + i), hd);
    float* dq = dqkv + hv.at(row0 + i, 0);
    for (int j = 0; j <= i; ++j) {
      const float* k = qkv + hv.at(row0 + j, 1);
      const float* v = qkv + hv.at(row0 + j, 2);
      const float p = std::exp(dot(q, k, hd) * scale - lse[i]);
      axpy_n(dqkv + hv.at(row0 + j, 2), p, g, hd);
      const float ds = p * (dot(g, v, hd) - di) * scale;
      axpy_n(dq, ds, k, hd);
      axpy_n(dqkv + hv.at(row0 + j, 1), ds, q, hd);
    }
  }
}

} // namespace

void cpu_backend::attention_forward(const float* qkv, float* y, float* lse, int batch, int time, int heads, int d) {
  std::vector<float> acc(static_cast<std::size_t>(d / heads));
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      forward_head(qkv, y, lse + (static_cast<std::ptrdiff_t>(b) * heads + h) * time,
                   static_cast<std::ptrdiff_t>(b) * time, time, {d, d / heads, h}, acc);
}

void cpu_backend::attention_backward(const float* qkv, const float* y, const float* dy, const float* lse,
                                     float* dqkv, int batch, int time, int heads, int d) {
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      backward_head(qkv, y, dy, lse + (static_cast<std::ptrdiff_t>(b) * heads + h) * time, dqkv,
                    static_cast<std::ptrdiff_t>(b) * time, time, {d, d / heads, h});
}

} // namespace gradwire::kernels
