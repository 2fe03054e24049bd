#pragma once
// Naive double-precision references the kernels are checked against, and
// small helpers shared by the tests.

#include "kernels/backend.hpp"
#include "kernels/bf16.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace gwtest {

/// The CPU backend, which most kernel tests run on.
inline gradwire::kernels::backend& cpu() { return gradwire::kernels::backend_for(gradwire::kernels::device::cpu()); }


inline std::vector<float> random_vec(std::size_t n, std::uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v)
    x = u(rng);
  return v;
}

/// n token ids drawn from [0, vocab) by `seed`, as floats (a GPT's input).
inline std::vector<float> random_tokens(std::size_t n, int vocab, std::uint64_t seed) {
  auto v = random_vec(n, seed, 0.f, static_cast<float>(vocab) - 0.01f);
  for (auto& x : v)
    x = std::floor(x);
  return v;
}

/// Every value rounded to bf16, so that a kernel computing in bf16 takes
/// it exactly.
inline void round_to_bf16(std::vector<float>& v) {
  for (auto& x : v)
    x = gradwire::kernels::from_bf16(gradwire::kernels::to_bf16(x));
}

/// Checks |a - b| <= atol + rtol * |b| elementwise, reporting the first miss.
inline void check_close(const std::vector<float>& a, const std::vector<double>& b, double rtol,
                        double atol) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - b[i]) > atol + rtol * std::abs(b[i])) {
      INFO("index " << i << ": got " << a[i] << ", expected " << b[i]);
      CHECK(std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]));
      return;
    }
  }
  SUCCEED();
}

inline void check_close(const std::vector<float>& a, const std::vector<float>& b, double rtol,
                        double atol) {
  check_close(a, std::vector<double>(b.begin(), b.end()), rtol, atol);
}

/// Row-major C = alpha op(A) op(B) + beta C.
inline std::vector<double> ref_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                                    const std::vector<float>& a, const std::vector<float>& b,
                                    double beta, const std::vector<float>& c) {
  std::vector<double> out(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[static_cast<std::size_t>(p) * m + i] : a[static_cast<std::size_t>(i) * k + p];
        const double bv = tb ? b[static_cast<std::size_t>(j) * k + p] : b[static_cast<std::size_t>(p) * n + j];
        s += av * bv;
      }
      out[static_cast<std::size_t>(i) * n + j] = alpha * s + beta * c[static_cast<std::size_t>(i) * n + j];
    }
  return out;
}

/// Direct convolution (cross-correlation), NCHW, weights [K, C, R, S].
inline std::vector<double> ref_conv(const gradwire::kernels::conv_geom& g, const std::vector<float>& x,
                                    const std::vector<float>& w) {
  const int oh = g.out_h(), ow = g.out_w();
  std::vector<double> y(static_cast<std::size_t>(g.n) * g.k * oh * ow, 0.0);
  for (int n = 0; n < g.n; ++n)
    for (int k = 0; k < g.k; ++k)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
          double s = 0;
          for (int c = 0; c < g.c; ++c)
            for (int r = 0; r < g.r; ++r)
              for (int q = 0; q < g.s; ++q) {
                const int iy = oy * g.stride - g.pad + r, ix = ox * g.stride - g.pad + q;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                  continue;
                s += static_cast<double>(x[((static_cast<std::size_t>(n) * g.c + c) * g.h + iy) * g.w + ix]) *
                     w[((static_cast<std::size_t>(k) * g.c + c) * g.r + r) * g.s + q];
              }
          y[((static_cast<std::size_t>(n) * g.k + k) * oh + oy) * ow + ox] = s;
        }
  return y;
}

} // namespace gwtest
