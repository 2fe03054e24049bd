// CPU kernels against naive double-precision references, odd shapes included.
#include "kernels/backend.hpp"
#include "kernels/cpu/onednn_gemm.hpp"
#include "kernels/host_vector.hpp"
#include "reference.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

#include <cstdlib>
#include <limits>
#include <string>

using namespace gradwire::kernels;
using gwtest::check_close;
using gwtest::cpu;
using gwtest::random_vec;

TEST_CASE("gemm matches the reference for every transpose and odd shapes") {
  struct shape { int m, n, k; };
  // The large ones go to oneDNN where the machine has it (kernels/cpu/onednn_gemm.hpp); the
  // ctest case "gemm: every shape through each library" forces every shape through each.
  for (auto s : {shape{1, 1, 1}, shape{3, 5, 7}, shape{17, 9, 33}, shape{64, 10, 128}, shape{2, 257, 3},
                 shape{65, 67, 129}, shape{64, 256, 784}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " ta=" << ta << " tb=" << tb);
        auto a = random_vec(static_cast<std::size_t>(s.m) * s.k, 1);
        auto b = random_vec(static_cast<std::size_t>(s.k) * s.n, 2);
        auto c = random_vec(static_cast<std::size_t>(s.m) * s.n, 3);
        auto expect = gwtest::ref_gemm(ta, tb, s.m, s.n, s.k, 0.5, a, b, 2.0, c);
        cpu().gemm(ta, tb, s.m, s.n, s.k, 0.5f, a.data(), ta ? s.m : s.k, b.data(), tb ? s.k : s.n,
                   2.f, c.data(), s.n);
        check_close(c, expect, 1e-5, 1e-5);
      }
}

TEST_CASE("gemm: oneDNN is found where the machine has it") {
  // scripts/setup.sh installs libdnnl2; a machine without it keeps OpenBLAS
  // for every GEMM, and the forced-oneDNN case then tests OpenBLAS again.
  const auto status = onednn_status();
  INFO(status);
  const char* forced = std::getenv("GRADWIRE_GEMM");
  const std::string lib = forced && *forced ? forced : "auto";
  if (status.rfind("oneDNN (", 0) != 0 || (lib == "auto" && !onednn_in_auto)) {
    WARN("no oneDNN in the automatic rule here: " << status);
    CHECK(gemm_choice(false, true, 64, 256, 784) == gemm_library::openblas);
  } else if (lib == "auto") { // the measured rule
    CHECK(gemm_choice(false, true, 64, 256, 784) == gemm_library::onednn);
    CHECK(gemm_choice(false, true, 64, 10, 128) == gemm_library::openblas); // an output layer: OpenBLAS is faster
  } else { // forced
    const auto want = lib == "onednn" ? gemm_library::onednn : gemm_library::openblas;
    CHECK(gemm_choice(false, true, 64, 256, 784) == want);
    CHECK(gemm_choice(false, false, 1, 1, 1) == want);
  }
}

TEST_CASE("the CPU refuses bf16 GEMMs, naming the key, and keeps computing in fp32") {
  auto& be = backend_for(device::cpu());
  CHECK_THROWS_WITH(be.set_gemm_math(gemm_math::bf16),
                    Catch::Contains("train.precision = \"bf16\"") && Catch::Contains("cpu computes in fp32 only"));
  CHECK(be.current_gemm_math() == gemm_math::fp32);
  CHECK_NOTHROW(be.set_gemm_math(gemm_math::fp32));
}

TEST_CASE("gemm with leading dimensions past the matrices writes only its own block") {
  const int m = 70, n = 66, k = 80, pad = 5; // every dimension 64 or more: oneDNN where present
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("ta=" << ta << " tb=" << tb);
      const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      auto a = random_vec(static_cast<std::size_t>(ta ? k : m) * lda, 6);
      auto b = random_vec(static_cast<std::size_t>(tb ? n : k) * ldb, 7);
      auto c = random_vec(static_cast<std::size_t>(m) * ldc, 8);
      // The dense copies the reference reads.
      std::vector<float> ad(static_cast<std::size_t>(m) * k), bd(static_cast<std::size_t>(k) * n),
        cd(static_cast<std::size_t>(m) * n);
      const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      for (int i = 0; i < ar; ++i)
        for (int j = 0; j < ac; ++j)
          ad[static_cast<std::size_t>(i) * ac + j] = a[static_cast<std::size_t>(i) * lda + j];
      for (int i = 0; i < br; ++i)
        for (int j = 0; j < bc; ++j)
          bd[static_cast<std::size_t>(i) * bc + j] = b[static_cast<std::size_t>(i) * ldb + j];
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j)
          cd[static_cast<std::size_t>(i) * n + j] = c[static_cast<std::size_t>(i) * ldc + j];
      const auto expect = gwtest::ref_gemm(ta, tb, m, n, k, 1.0, ad, bd, 0.5, cd);
      const auto before = c;
      cpu().gemm(ta, tb, m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
      std::vector<float> got(cd.size());
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < ldc; ++j) {
          const auto at = static_cast<std::size_t>(i) * ldc + j;
          if (j < n)
            got[static_cast<std::size_t>(i) * n + j] = c[at];
          else
            REQUIRE(c[at] == before[at]); // the padding is not C's
        }
      check_close(got, expect, 1e-5, 1e-5);
    }
}

TEST_CASE("bias add and bias gradient, rows and NCHW") {
  const int rows = 5, cols = 7;
  auto y = random_vec(rows * cols, 4), b = random_vec(cols, 5);
  auto y0 = y;
  cpu().bias_add_rows(y.data(), b.data(), rows, cols);
  std::vector<float> db(cols, 1.f);
  cpu().bias_grad_rows(y0.data(), db.data(), rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      CHECK(y[r * cols + c] == Approx(y0[r * cols + c] + b[c]));
  for (int c = 0; c < cols; ++c) {
    double s = 1;
    for (int r = 0; r < rows; ++r)
      s += y0[r * cols + c];
    CHECK(db[c] == Approx(s).epsilon(1e-5));
  }
  const int n = 3, ch = 4, hw = 5;
  auto z = random_vec(n * ch * hw, 6), bz = random_vec(ch, 7);
  auto z0 = z;
  cpu().bias_add_nchw(z.data(), bz.data(), n, ch, hw);
  std::vector<float> dbz(ch, 0.f);
  cpu().bias_grad_nchw(z0.data(), dbz.data(), n, ch, hw);
  for (int c = 0; c < ch; ++c) {
    double s = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hw; ++j) {
        s += z0[(i * ch + c) * hw + j];
        CHECK(z[(i * ch + c) * hw + j] == Approx(z0[(i * ch + c) * hw + j] + bz[c]));
      }
    CHECK(dbz[c] == Approx(s).epsilon(1e-5));
  }
}

TEST_CASE("elementwise kernels and sum") {
  const std::size_t n = 1001;
  auto x = random_vec(n, 8), y = random_vec(n, 9);
  std::vector<float> out(n), dx(n);
  cpu().relu_forward(x.data(), out.data(), n);
  cpu().relu_backward(out.data(), y.data(), dx.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(out[i] == (x[i] > 0 ? x[i] : 0.f));
    CHECK(dx[i] == (x[i] > 0 ? y[i] : 0.f));
  }
  auto z = y;
  cpu().axpy(n, 0.25f, x.data(), z.data());
  for (std::size_t i = 0; i < n; ++i)
    CHECK(z[i] == Approx(y[i] + 0.25f * x[i]));
  cpu().scale(n, -2.f, z.data());
  cpu().add(n, x.data(), y.data(), out.data());
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(out[i] == x[i] + y[i]);
    s += x[i];
  }
  CHECK(cpu().sum(x.data(), n) == Approx(s));
  // Rank values 0..7: the sum is n(n-1)/2 exactly.
  std::vector<float> ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(cpu().sum(ranks.data(), ranks.size()) == 28.0);
}

TEST_CASE("host vector updates round each element as written, at every length and in place") {
  // Each result against the scalar expression, bit for bit: the vector
  // clones must not reorder or contract, whatever the length's remainder.
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{1001}}) {
    INFO("n=" << n);
    const auto a = random_vec(n, 21), b = random_vec(n, 22), c = random_vec(n, 23);
    std::vector<float> out(n), x = b, w = b, base(n);
    subtract(n, a.data(), b.data(), out.data());
    subtract_from(n, a.data(), x.data());
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(out[i] == a[i] - b[i]);
      CHECK(x[i] == a[i] - b[i]);
    }
    x = b;
    pull_toward(n, 0.3f, a.data(), x.data());
    delay_compensate(n, 0.7f, a.data(), b.data(), c.data(), out.data());
    merge_answer(n, 0.6f, a.data(), c.data(), w.data(), base.data());
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(x[i] == a[i] + 0.3f * (b[i] - a[i]));
      CHECK(out[i] == a[i] + 0.7f * a[i] * a[i] * (b[i] - c[i]));
      const float pull = 0.6f * (a[i] - c[i]);
      CHECK(w[i] == b[i] + pull);
      CHECK(base[i] == c[i] + pull);
    }
  }
}

TEST_CASE("all_finite finds a NaN or an infinity wherever it lies, and passes every finite float") {
  const float inf = std::numeric_limits<float>::infinity();
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{1001}}) {
    std::vector<float> x = random_vec(n, 31);
    x[0] = std::numeric_limits<float>::max();
    x[n / 2] = -std::numeric_limits<float>::max();
    x[n - 1] = std::numeric_limits<float>::denorm_min();
    CHECK(all_finite(n, x.data()));
    CHECK(all_finite(0, nullptr));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), inf, -inf})
      for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
        INFO("n=" << n << " at=" << at << " value=" << bad);
        auto y = x;
        y[at] = bad;
        CHECK_FALSE(all_finite(n, y.data()));
      }
  }
}

TEST_CASE("softmax cross-entropy: loss, gradient, accuracy") {
  const int n = 6, classes = 5;
  auto logits = random_vec(n * classes, 10, -4.f, 4.f);
  logits[0] = 1000.f; // a large logit must not overflow
  std::vector<std::int32_t> labels = {0, 1, 2, 3, 4, 0};
  std::vector<float> d(n * classes);
  auto r = cpu().softmax_xent(logits.data(), labels.data(), n, classes, d.data(), 0.5f);
  double loss = 0;
  std::int64_t correct = 0;
  for (int i = 0; i < n; ++i) {
    const float* z = &logits[i * classes];
    double m = z[0];
    int best = 0;
    for (int j = 1; j < classes; ++j)
      if (z[j] > m) {
        m = z[j];
        best = j;
      }
    double se = 0;
    for (int j = 0; j < classes; ++j)
      se += std::exp(z[j] - m);
    loss += std::log(se) + m - z[labels[i]];
    correct += best == labels[i];
    for (int j = 0; j < classes; ++j) {
      const double p = std::exp(z[j] - m) / se;
      CHECK(d[i * classes + j] == Approx(0.5 * (p - (j == labels[i]))).margin(1e-6));
    }
  }
  CHECK(r.loss_sum == Approx(loss));
  CHECK(r.correct == correct);
  CHECK(std::isfinite(r.loss_sum));
}

TEST_CASE("SGD with momentum, weight decay and Nesterov follows PyTorch's formula") {
  const std::size_t n = 37;
  for (bool nesterov : {false, true}) {
    auto w = random_vec(n, 11), g = random_vec(n, 12);
    std::vector<float> v(n, 0.f);
    auto w_ref = std::vector<double>(w.begin(), w.end());
    std::vector<double> v_ref(n, 0.0);
    for (int step = 0; step < 3; ++step) {
      cpu().sgd_update(n, 0.1f, 0.9f, 0.01f, nesterov, w.data(), g.data(), v.data());
      for (std::size_t i = 0; i < n; ++i) {
        const double gi = g[i] + 0.01 * w_ref[i];
        v_ref[i] = 0.9 * v_ref[i] + gi;
        w_ref[i] -= 0.1 * (nesterov ? gi + 0.9 * v_ref[i] : v_ref[i]);
      }
    }
    check_close(w, w_ref, 1e-5, 1e-6);
  }
}

TEST_CASE("Adam follows PyTorch's formula with bias correction") {
  const std::size_t n = 29;
  auto w = random_vec(n, 13), g = random_vec(n, 14);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  auto w_ref = std::vector<double>(w.begin(), w.end());
  std::vector<double> m_ref(n, 0.0), v_ref(n, 0.0);
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (int step = 1; step <= 4; ++step) {
    cpu().adam_update(n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, step, w.data(), g.data(), m.data(), v.data());
    for (std::size_t i = 0; i < n; ++i) {
      m_ref[i] = b1 * m_ref[i] + (1 - b1) * g[i];
      v_ref[i] = b2 * v_ref[i] + (1 - b2) * g[i] * g[i];
      const double mh = m_ref[i] / (1 - std::pow(b1, step)), vh = v_ref[i] / (1 - std::pow(b2, step));
      w_ref[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  check_close(w, w_ref, 1e-5, 1e-6);
}

TEST_CASE("batch norm forward: batch statistics, running statistics, eval mode") {
  const int n = 3, c = 2, hw = 5;
  auto x = random_vec(n * c * hw, 15, -2.f, 3.f);
  std::vector<float> y(x.size()), gamma = {1.5f, 0.5f}, beta = {0.1f, -0.2f};
  std::vector<float> mean(c), invstd(c), rmean = {0.f, 0.f}, rvar = {1.f, 1.f};
  cpu().batchnorm_forward_train(x.data(), y.data(), n, c, hw, gamma.data(), beta.data(), mean.data(),
                                invstd.data(), rmean.data(), rvar.data(), 0.1f, 1e-5f);
  for (int ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0;
    const int m = n * hw;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hw; ++j)
        s += x[(i * c + ch) * hw + j];
    const double mu = s / m;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hw; ++j)
        ss += std::pow(x[(i * c + ch) * hw + j] - mu, 2);
    const double var = ss / m;
    CHECK(mean[ch] == Approx(mu).margin(1e-6));
    CHECK(rmean[ch] == Approx(0.1 * mu).margin(1e-6));
    CHECK(rvar[ch] == Approx(0.9 + 0.1 * var * m / (m - 1)).epsilon(1e-5));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hw; ++j) {
        const auto k = static_cast<std::size_t>((i * c + ch) * hw + j);
        CHECK(y[k] == Approx(gamma[ch] * (x[k] - mu) / std::sqrt(var + 1e-5) + beta[ch]).margin(1e-5));
      }
  }
  std::vector<float> ye(x.size());
  cpu().batchnorm_forward_eval(x.data(), ye.data(), n, c, hw, gamma.data(), beta.data(), rmean.data(),
                               rvar.data(), 1e-5f);
  CHECK(ye[0] == Approx(gamma[0] * (x[0] - rmean[0]) / std::sqrt(rvar[0] + 1e-5) + beta[0]).margin(1e-5));
}

TEST_CASE("batch norm fused with ReLU equals batch norm then ReLU bit for bit at odd plane sizes") {
  // Planes of 37 and 3 values: the vector loops' tails; some outputs exactly 0.
  for (int hw : {37, 3}) {
    const int n = 4, c = 3;
    const auto total = static_cast<std::size_t>(n * c * hw);
    INFO("hw " << hw);
    auto x = random_vec(total, 21, -2.f, 2.f), dy = random_vec(total, 22);
    std::vector<float> gamma = {1.5f, 0.5f, 2.f}, beta = {0.1f, -0.2f, 0.f};
    std::vector<float> y1(total), y2(total), masked(total), dx1(total), dx2(total), e1(total), e2(total);
    std::vector<float> m1(3), m2(3), i1(3), i2(3), dg1(3, 0.f), dg2(3, 0.f), db1(3, 0.f), db2(3, 0.f);
    std::vector<float> rm = {0.2f, -0.1f, 0.f}, rv = {1.f, 2.f, 0.5f};
    cpu().batchnorm_forward_train(x.data(), y1.data(), n, c, hw, gamma.data(), beta.data(), m1.data(), i1.data(),
                                  nullptr, nullptr, 0.1f, 1e-5f, true);
    cpu().batchnorm_forward_train(x.data(), y2.data(), n, c, hw, gamma.data(), beta.data(), m2.data(), i2.data(),
                                  nullptr, nullptr, 0.1f, 1e-5f);
    cpu().relu_forward(y2.data(), y2.data(), total);
    CHECK(y1 == y2);
    CHECK(std::count(y1.begin(), y1.end(), 0.f) > 0);
    cpu().batchnorm_backward(x.data(), dy.data(), dx1.data(), n, c, hw, gamma.data(), m1.data(), i1.data(),
                             dg1.data(), db1.data(), y1.data());
    cpu().relu_backward(y2.data(), dy.data(), masked.data(), total);
    cpu().batchnorm_backward(x.data(), masked.data(), dx2.data(), n, c, hw, gamma.data(), m2.data(), i2.data(),
                             dg2.data(), db2.data());
    CHECK(dx1 == dx2);
    CHECK(dg1 == dg2);
    CHECK(db1 == db2);
    cpu().batchnorm_forward_eval(x.data(), e1.data(), n, c, hw, gamma.data(), beta.data(), rm.data(), rv.data(),
                                 1e-5f, true);
    cpu().batchnorm_forward_eval(x.data(), e2.data(), n, c, hw, gamma.data(), beta.data(), rm.data(), rv.data(),
                                 1e-5f);
    cpu().relu_forward(e2.data(), e2.data(), total);
    CHECK(e1 == e2);
  }
}
