// The transformer kernels against plain double-precision references,
// forward and backward, including context lengths that are not a multiple
// of the attention's key tile (64).
#include "kernels/backend.hpp"
#include "kernels/dropout_mask.hpp"
#include "kernels/error.hpp"
#include "reference.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace gradwire;
using gwtest::cpu;
using gwtest::random_vec;

namespace {


void require_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
    if (err > worst)
      worst = err, at = i;
  }
  INFO(what << ": worst relative error " << worst << " at " << at << " (got " << got[at] << ", want " << want[at]
            << ")");
  CHECK(worst <= tol);
}

double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

/// Naive causal attention in double: y, and the gradients of sum(y * dy),
/// with the probabilities dropped as `drop` says (kernels/dropout_mask.hpp).
struct attention_ref {
  std::vector<double> y, dqkv;
};

attention_ref naive_attention(const std::vector<float>& qkv, const std::vector<float>& dy, int B, int T, int H,
                              int D, const kernels::attention_dropout& drop = {}) {
  const int hd = D / H;
  const auto mask = kernels::make_dropout_mask(drop.p, drop.key);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  attention_ref r{std::vector<double>(static_cast<std::size_t>(B) * T * D, 0.0),
                  std::vector<double>(qkv.size(), 0.0)};
  auto at = [&](int b, int t, int part, int h, int c) {
    return ((static_cast<std::size_t>(b) * T + t) * 3 * D) + static_cast<std::size_t>(part) * D +
           static_cast<std::size_t>(h) * hd + c;
  };
  auto yat = [&](int b, int t, int h, int c) { return (static_cast<std::size_t>(b) * T + t) * D + h * hd + c; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> p(static_cast<std::size_t>(i) + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int c = 0; c < hd; ++c)
            s += static_cast<double>(qkv[at(b, i, 0, h, c)]) * qkv[at(b, j, 1, h, c)];
          p[static_cast<std::size_t>(j)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        for (auto& v : p)
          sum += (v = std::exp(v - mx));
        for (auto& v : p)
          v /= sum;
        // With z_j the dropout scale: y_i = sum_j z_j p_j v_j;
        // dP_j = z_j dy_i . v_j; dS_j = p_j (dP_j - sum_k p_k dP_k).
        std::vector<double> dp(p.size());
        double dot = 0;
        const auto head_row = static_cast<std::uint64_t>(drop.first_sample + b) * H + h;
        for (int j = 0; j <= i; ++j) {
          const double z = mask.on ? mask.scale(kernels::attention_index(head_row, T, i, j)) : 1.0, pz = p[static_cast<std::size_t>(j)] * z;
          for (int c = 0; c < hd; ++c) {
            r.y[yat(b, i, h, c)] += pz * qkv[at(b, j, 2, h, c)];
            dp[static_cast<std::size_t>(j)] += z * dy[yat(b, i, h, c)] * qkv[at(b, j, 2, h, c)];
            r.dqkv[at(b, j, 2, h, c)] += pz * dy[yat(b, i, h, c)];
          }
          dot += p[static_cast<std::size_t>(j)] * dp[static_cast<std::size_t>(j)];
        }
        for (int j = 0; j <= i; ++j) {
          const double ds = p[static_cast<std::size_t>(j)] * (dp[static_cast<std::size_t>(j)] - dot) * scale;
          for (int c = 0; c < hd; ++c) {
            r.dqkv[at(b, i, 0, h, c)] += ds * qkv[at(b, j, 1, h, c)];
            r.dqkv[at(b, j, 1, h, c)] += ds * qkv[at(b, i, 0, h, c)];
          }
        }
      }
  return r;
}

} // namespace

TEST_CASE("Causal attention matches a naive softmax attention, forward and backward, at any context", "[gpt]") {
  for (int T : {1, 5, 63, 64, 65, 130}) {
    const int B = 2, H = 2, D = 16;
    auto qkv = random_vec(static_cast<std::size_t>(B) * T * 3 * D, 11 + T, -2.f, 2.f);
    auto dy = random_vec(static_cast<std::size_t>(B) * T * D, 23 + T);
    std::vector<float> y(dy.size()), lse(static_cast<std::size_t>(B) * H * T), dqkv(qkv.size(), 7.f);
    cpu().attention_forward(qkv.data(), y.data(), lse.data(), B, T, H, D, {});
    cpu().attention_backward(qkv.data(), y.data(), dy.data(), lse.data(), dqkv.data(), B, T, H, D, {});
    const auto ref = naive_attention(qkv, dy, B, T, H, D);
    INFO("context " << T);
    require_close(y, ref.y, 2e-5, "y");
    require_close(dqkv, ref.dqkv, 5e-5, "dqkv");
  }
}

TEST_CASE("Attention's dropout drops the probabilities its mask names, forward and backward, and a batch split "
          "over calls draws the whole batch's mask",
          "[gpt]") {
  const int B = 3, H = 2, D = 16;
  const kernels::attention_dropout drop{0.3f, 0x5eedull, 4}; // the call's samples are 4-6 of the step's batch
  for (int T : {5, 65, 130}) {
    INFO("context " << T);
    const auto rows = static_cast<std::size_t>(B) * T;
    auto qkv = random_vec(rows * 3 * D, 31 + T, -2.f, 2.f);
    auto dy = random_vec(rows * D, 37 + T);
    std::vector<float> y(dy.size()), lse(static_cast<std::size_t>(B) * H * T), dqkv(qkv.size(), 7.f);
    cpu().attention_forward(qkv.data(), y.data(), lse.data(), B, T, H, D, drop);
    cpu().attention_backward(qkv.data(), y.data(), dy.data(), lse.data(), dqkv.data(), B, T, H, D, drop);
    const auto ref = naive_attention(qkv, dy, B, T, H, D, drop);
    require_close(y, ref.y, 2e-5, "y");
    require_close(dqkv, ref.dqkv, 5e-5, "dqkv");
    // Without dropout, or under another step's key, the outputs differ.
    const auto whole = naive_attention(qkv, dy, B, T, H, D);
    const auto other = naive_attention(qkv, dy, B, T, H, D, {0.3f, 0x5eedull + 1, 4});
    CHECK(max_diff(y, whole.y) > 1e-2);
    CHECK(max_diff(y, other.y) > 1e-2);
    // The last sample alone, as sample 6 of the step: the same rows.
    const auto last = rows - static_cast<std::size_t>(T);
    std::vector<float> y1(static_cast<std::size_t>(T) * D), lse1(static_cast<std::size_t>(H) * T);
    cpu().attention_forward(qkv.data() + last * 3 * D, y1.data(), lse1.data(), 1, T, H, D, {0.3f, 0x5eedull, 6});
    CHECK(std::equal(y1.begin(), y1.end(), y.begin() + static_cast<std::ptrdiff_t>(last * D)));
  }
  // A probability outside [0, 1) is refused, naming the kernel.
  std::vector<float> qkv(3 * D), y(D), lse(H), dqkv(3 * D);
  for (float p : {1.f, -0.1f, std::nanf("")}) {
    INFO("p " << p);
    CHECK_THROWS_WITH(cpu().attention_forward(qkv.data(), y.data(), lse.data(), 1, 1, H, D, {p, 1, 0}),
                      Catch::Contains("attention: dropout probability"));
    CHECK_THROWS_WITH(cpu().attention_backward(qkv.data(), y.data(), y.data(), lse.data(), dqkv.data(), 1, 1, H, D,
                                               {p, 1, 0}),
                      Catch::Contains("not in [0, 1)"));
    CHECK_THROWS_WITH(cpu().dropout(y.data(), 1, D, p, 1, 0), Catch::Contains("dropout: dropout probability"));
  }
}

TEST_CASE("LayerNorm matches its definition, forward and backward", "[gpt]") {
  const int rows = 7, cols = 37;
  auto x = random_vec(rows * cols, 3, -3.f, 3.f), w = random_vec(cols, 4), b = random_vec(cols, 5);
  auto dy = random_vec(rows * cols, 6);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dw(cols, 1.f), db(cols, 2.f);
  cpu().layernorm_forward(x.data(), y.data(), mean.data(), rstd.data(), w.data(), b.data(), rows, cols, 1e-5f);
  cpu().layernorm_backward(x.data(), dy.data(), mean.data(), rstd.data(), w.data(), dx.data(), dw.data(), db.data(),
                           rows, cols);
  std::vector<double> ry(x.size()), rdx(x.size()), rdw(cols, 1.0), rdb(cols, 2.0);
  for (int i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (int j = 0; j < cols; ++j)
      mu += x[i * cols + j];
    mu /= cols;
    for (int j = 0; j < cols; ++j)
      var += (x[i * cols + j] - mu) * (x[i * cols + j] - mu);
    const double r = 1.0 / std::sqrt(var / cols + 1e-5);
    double s1 = 0, s2 = 0;
    for (int j = 0; j < cols; ++j) {
      const double xh = (x[i * cols + j] - mu) * r, g = dy[i * cols + j] * static_cast<double>(w[j]);
      ry[i * cols + j] = xh * w[j] + b[j];
      rdw[j] += dy[i * cols + j] * xh;
      rdb[j] += dy[i * cols + j];
      s1 += g, s2 += g * xh;
    }
    for (int j = 0; j < cols; ++j) {
      const double xh = (x[i * cols + j] - mu) * r;
      rdx[i * cols + j] = r * (dy[i * cols + j] * static_cast<double>(w[j]) - s1 / cols - xh * s2 / cols);
    }
  }
  require_close(y, ry, 1e-5, "y");
  require_close(dx, rdx, 1e-5, "dx");
  require_close(dw, rdw, 1e-5, "dw (accumulated)");
  require_close(db, rdb, 1e-5, "db (accumulated)");
}

TEST_CASE("Exact GELU and its derivative match erf's definition and a finite difference", "[gpt]") {
  auto x = random_vec(1000, 8, -6.f, 6.f);
  std::vector<float> ones(x.size(), 1.f), y(x.size()), dx(x.size());
  cpu().gelu_forward(x.data(), y.data(), x.size());
  cpu().gelu_backward(x.data(), ones.data(), dx.data(), x.size());
  std::vector<double> ry(x.size()), rdx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto f = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
    ry[i] = f(x[i]);
    rdx[i] = (f(x[i] + 1e-6) - f(x[i] - 1e-6)) / 2e-6;
  }
  require_close(y, ry, 1e-6, "y");
  require_close(dx, rdx, 1e-5, "dx");
}

TEST_CASE("Embeddings gather token and position rows, scatter their gradients back, and refuse bad tokens",
          "[gpt]") {
  const int B = 2, T = 3, d = 4, V = 5;
  std::vector<float> tok = {0, 4, 4, 2, 1, 0};
  auto wte = random_vec(V * d, 1), wpe = random_vec(T * d, 2);
  std::vector<float> h(B * T * d);
  cpu().embedding_forward(tok.data(), wte.data(), wpe.data(), h.data(), B, T, d, V);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < d; ++j)
        CHECK(h[(b * T + t) * d + j] == wte[static_cast<int>(tok[b * T + t]) * d + j] + wpe[t * d + j]);
  std::vector<float> dh(h.size(), 1.f), dwte(wte.size(), 0.f), dwpe(wpe.size(), 0.f);
  cpu().embedding_backward(tok.data(), dh.data(), dwte.data(), dwpe.data(), B, T, d, V);
  CHECK(dwte[4 * d] == 2.f); // token 4 twice
  CHECK(dwte[3 * d] == 0.f); // token 3 never
  CHECK(dwpe[0] == 2.f);     // each position once per sequence
  tok[3] = 5;
  CHECK_THROWS_WITH(cpu().embedding_forward(tok.data(), wte.data(), wpe.data(), h.data(), B, T, d, V),
                    Catch::Contains("token 5") && Catch::Contains("position 3"));
}

TEST_CASE("Dropout drops its fraction, scales what it keeps, and gives each element its mask however the rows are split",
          "[gpt]") {
  auto& cpu = kernels::backend_for(kernels::device::cpu());
  const int rows = 400, cols = 250;
  const float p = 0.2f;
  const auto x = random_vec(static_cast<std::size_t>(rows) * cols, 61, 0.5f, 1.5f); // no zeros of its own
  auto whole = x;
  cpu.dropout(whole.data(), rows, cols, p, 7, 0);
  std::size_t dropped = 0, misscaled = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (whole[i] == 0.f)
      ++dropped;
    else if (whole[i] != x[i] * (1.f / (1.f - p)))
      ++misscaled;
  }
  CHECK(misscaled == 0);
  // 100,000 draws: the fraction within 4 standard deviations (0.0051) of p.
  CHECK(std::abs(static_cast<double>(dropped) / static_cast<double>(x.size()) - p) < 0.0051);
  // Rows [150, 400) on their own, from row 150: the same mask.
  auto tail = std::vector<float>(x.begin() + 150 * cols, x.end());
  cpu.dropout(tail.data(), rows - 150, cols, p, 7, 150);
  CHECK(tail == std::vector<float>(whole.begin() + 150 * cols, whole.end()));
  // Another key, another mask; the same key, the same one.
  auto other = x, again = x;
  cpu.dropout(other.data(), rows, cols, p, 8, 0);
  cpu.dropout(again.data(), rows, cols, p, 7, 0);
  CHECK(other != whole);
  CHECK(again == whole);
  // p = 0 keeps every value as it is.
  auto none = x;
  cpu.dropout(none.data(), rows, cols, 0.f, 7, 0);
  CHECK(none == x);
}
