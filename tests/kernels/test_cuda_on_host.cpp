// The GPT's CUDA kernels run on the host (host_sim.hpp), against naive
// references in double: so every machine checks their logic (tiles, causal
// masks, staging, barriers, reductions, the bad-token flag), and a GPU
// run only has the hardware left to prove (tests/cuda/test_cuda_transformer.cpp).
#include "kernels/host_sim.hpp"

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_tc_kernels.cuh"
#include "kernels/cuda/bias_kernels.cuh"
#include "kernels/cuda/transformer_kernels.cuh"

#include "kernels/backend.hpp"
#include "reference.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace gradwire::kernels::cuda_kernels;
using gwtest::random_vec;

namespace {

double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

struct attention_reference {
  std::vector<double> y, lse, dqkv;
};

/// Softmax attention over keys j <= i, each head on its own, in double:
/// y, the log-sum-exp and the gradient of <dy, y> with respect to qkv,
/// with the probabilities dropped as `drop` says.
attention_reference naive_attention(const std::vector<float>& qkv, const std::vector<float>& dy, int batch,
                                    int time, int heads, int d, const gradwire::kernels::attention_dropout& drop = {}) {
  const int hd = d / heads;
  const auto mask = gradwire::kernels::make_dropout_mask(drop.p, drop.key);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  attention_reference r{std::vector<double>(dy.size()), std::vector<double>(static_cast<std::size_t>(batch * heads * time)),
                        std::vector<double>(qkv.size())};
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h) {
      const auto at = [&](int t, int part, int c) {
        return (static_cast<std::size_t>(b) * time + t) * 3 * d + part * d + h * hd + c;
      };
      const auto yat = [&](int t, int c) { return (static_cast<std::size_t>(b) * time + t) * d + h * hd + c; };
      for (int i = 0; i < time; ++i) {
        std::vector<double> p(static_cast<std::size_t>(i + 1)), dp(p.size());
        double m = -1e300, z = 0, di = 0;
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int c = 0; c < hd; ++c)
            s += static_cast<double>(qkv[at(i, 0, c)]) * qkv[at(j, 1, c)];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        for (auto& v : p)
          z += (v = std::exp(v - m));
        r.lse[(static_cast<std::size_t>(b) * heads + h) * time + i] = m + std::log(z);
        const auto head_row = static_cast<std::uint64_t>(drop.first_sample + b) * heads + h;
        std::vector<double> keep(p.size(), 1.0);
        for (int j = 0; j <= i; ++j) {
          p[j] /= z;
          if (mask.on)
            keep[j] = mask.scale(gradwire::kernels::attention_index(head_row, time, i, j));
          for (int c = 0; c < hd; ++c) {
            r.y[yat(i, c)] += keep[j] * p[j] * qkv[at(j, 2, c)];
            dp[j] += keep[j] * dy[yat(i, c)] * static_cast<double>(qkv[at(j, 2, c)]);
          }
          di += p[j] * dp[j];
        }
        for (int j = 0; j <= i; ++j)
          for (int c = 0; c < hd; ++c) {
            const double ds = p[j] * (dp[j] - di) * scale;
            r.dqkv[at(i, 0, c)] += ds * qkv[at(j, 1, c)];
            r.dqkv[at(j, 1, c)] += ds * qkv[at(i, 0, c)];
            r.dqkv[at(j, 2, c)] += keep[j] * p[j] * dy[yat(i, c)];
          }
      }
    }
  return r;
}

template <int HD>
void run_attention(const geometry& g, const std::vector<float>& qkv, const std::vector<float>& dy,
                   std::vector<float>& y, std::vector<float>& lse, std::vector<float>& dqkv) {
  constexpr int R = tile_of<HD>::rows;
  const dim3 grid(static_cast<unsigned>((g.time + R - 1) / R), static_cast<unsigned>(g.batch * g.heads));
  std::vector<float> di(lse.size());
  gwsim::launch(grid, R, [&] { attention_fwd<HD>(qkv.data(), y.data(), lse.data(), g); });
  gwsim::launch(dim3(2), 64, [&] { attention_di(y.data(), dy.data(), di.data(), g.batch * g.time, g.heads, g.d, g.time); });
  gwsim::launch(grid, R, [&] { attention_bwd_dq<HD>(qkv.data(), dy.data(), lse.data(), di.data(), dqkv.data(), g); });
  gwsim::launch(grid, R, [&] { attention_bwd_dkv<HD>(qkv.data(), dy.data(), lse.data(), di.data(), dqkv.data(), g); });
}

/// The kernels' geometry, with attention's dropout as the backend sets it.
geometry geometry_for(int batch, int time, int heads, int d, const gradwire::kernels::attention_dropout& drop) {
  const int hd = d / heads;
  return {batch,
          time,
          heads,
          d,
          hd,
          1.f / std::sqrt(static_cast<float>(hd)),
          gradwire::kernels::make_dropout_mask(drop.p, drop.key),
          static_cast<std::uint64_t>(drop.first_sample) * static_cast<std::uint64_t>(heads)};
}

template <int HD>
void check_attention(int batch, int time, int heads, int d, const gradwire::kernels::attention_dropout& drop = {}) {
  INFO("attention batch " << batch << " time " << time << " heads " << heads << " d " << d << " dropout "
                          << drop.p);
  const geometry g = geometry_for(batch, time, heads, d, drop);
  const auto rows = static_cast<std::size_t>(batch) * time;
  const auto qkv = random_vec(rows * 3 * d, 11, -2.f, 2.f), dy = random_vec(rows * d, 12);
  std::vector<float> y(rows * d), lse(rows * heads), dqkv(qkv.size(), 1e9f); // every element must be written
  run_attention<HD>(g, qkv, dy, y, lse, dqkv);
  const auto ref = naive_attention(qkv, dy, batch, time, heads, d, drop);
  CHECK(max_diff(y, ref.y) < 1e-5);
  CHECK(max_diff(lse, ref.lse) < 1e-5);
  CHECK(max_diff(dqkv, ref.dqkv) < 1e-5);
}

template <int HD>
void run_attention_tc(const geometry& g, const std::vector<float>& qkv, const std::vector<float>& dy,
                      std::vector<float>& y, std::vector<float>& lse, std::vector<float>& dqkv) {
  using T = tc_tile<HD>;
  const dim3 grid(static_cast<unsigned>((g.time + T::rows - 1) / T::rows), static_cast<unsigned>(g.batch * g.heads));
  std::vector<float> di(lse.size());
  gwsim::launch(grid, T::threads, [&] { attention_fwd_tc<HD>(qkv.data(), y.data(), lse.data(), g); });
  gwsim::launch(dim3(2), 64, [&] { attention_di(y.data(), dy.data(), di.data(), g.batch * g.time, g.heads, g.d, g.time); });
  gwsim::launch(grid, T::threads,
                [&] { attention_bwd_dq_tc<HD>(qkv.data(), dy.data(), lse.data(), di.data(), dqkv.data(), g); });
  gwsim::launch(grid, T::threads,
                [&] { attention_bwd_dkv_tc<HD>(qkv.data(), dy.data(), lse.data(), di.data(), dqkv.data(), g); });
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    m = std::max(m, std::abs(x));
  return m;
}

/// The Tensor-Core kernels on inputs that bf16 holds exactly, so what is
/// left to differ is their own rounding of P and dS to bf16 and their fp32
/// sums.
template <int HD>
void check_attention_tc(int batch, int time, int heads, int d, const gradwire::kernels::attention_dropout& drop = {}) {
  INFO("bf16 attention batch " << batch << " time " << time << " heads " << heads << " d " << d << " dropout "
                               << drop.p);
  const geometry g = geometry_for(batch, time, heads, d, drop);
  const auto rows = static_cast<std::size_t>(batch) * time;
  auto qkv = random_vec(rows * 3 * d, 11, -2.f, 2.f), dy = random_vec(rows * d, 12);
  gwtest::round_to_bf16(qkv);
  gwtest::round_to_bf16(dy);
  std::vector<float> y(rows * d, 1e9f), lse(rows * heads, 1e9f), dqkv(qkv.size(), 1e9f); // every element written
  run_attention_tc<HD>(g, qkv, dy, y, lse, dqkv);
  const auto ref = naive_attention(qkv, dy, batch, time, heads, d, drop);
  const double ey = max_diff(y, ref.y) / max_abs(ref.y), el = max_diff(lse, ref.lse),
               eg = max_diff(dqkv, ref.dqkv) / max_abs(ref.dqkv);
  INFO("relative errors: y " << ey << ", lse " << el << " (absolute), dqkv " << eg);
  CHECK(ey < 5e-3);
  CHECK(el < 1e-5);
  CHECK(eg < 1e-2);
}

} // namespace

TEST_CASE("CUDA bf16 attention kernels on the host match softmax attention to bf16's rounding, at any context") {
  check_attention_tc<16>(2, 37, 2, 32);   // a partial query block, key tiles of 32
  check_attention_tc<16>(1, 1, 1, 16);    // a single position
  check_attention_tc<32>(2, 100, 4, 128); // blocks of 64 and a partial one
  check_attention_tc<64>(1, 130, 2, 128); // three blocks, the last of 2 positions
  check_attention_tc<128>(1, 70, 1, 96);  // a head under its bound: zero columns
  check_attention_tc<128>(1, 65, 2, 256); // blocks of 32 positions (two warps)
}

TEST_CASE("CUDA attention kernels on the host match softmax attention, forward and backward, at any context") {
  check_attention<16>(2, 37, 2, 32);   // one partial tile
  check_attention<16>(1, 1, 1, 16);    // a single position
  check_attention<32>(2, 100, 4, 128); // a full tile and a partial one
  check_attention<64>(1, 130, 2, 128); // three tiles
  check_attention<128>(1, 70, 1, 96);  // a head under its bound
  check_attention<128>(1, 65, 2, 256); // tiles of 32
}

TEST_CASE("CUDA attention kernels on the host drop the probabilities that the shared mask names, in fp32 and bf16") {
  const gradwire::kernels::attention_dropout drop{0.25f, 0xa77e47ull, 3}; // samples 3 and 4 of the step's batch
  check_attention<16>(2, 37, 2, 32, drop);
  check_attention<32>(2, 100, 4, 128, drop);
  check_attention<128>(1, 65, 2, 256, drop);
  check_attention_tc<16>(2, 37, 2, 32, drop);
  check_attention_tc<64>(1, 130, 2, 128, drop);
  check_attention_tc<128>(1, 65, 2, 256, drop);
}

TEST_CASE("CUDA bias gradient kernels on the host sum every row of every column, at many rows or few") {
  for (const auto& [rows, cols] : {std::pair{1000, 130}, std::pair{37, 5}, std::pair{3, 300}}) {
    INFO(rows << " rows, " << cols << " columns");
    const auto dy = random_vec(static_cast<std::size_t>(rows) * cols, 31 + rows);
    std::vector<float> db = random_vec(static_cast<std::size_t>(cols), 32), part(bias_slices * cols, 1e9f);
    std::vector<double> want(db.begin(), db.end()); // accumulated onto
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j)
        want[static_cast<std::size_t>(j)] += dy[static_cast<std::size_t>(r) * cols + j];
    const dim3 grid(static_cast<unsigned>((cols + 63) / 64), bias_slices);
    gwsim::launch(grid, 64, [&] { bias_grad_partials(dy.data(), part.data(), rows, cols); });
    gwsim::launch(grid.x, 64, [&] { bias_grad_sum(part.data(), db.data(), cols); });
    CHECK(max_diff(db, want) < 1e-4);
  }
}

TEST_CASE("CUDA LayerNorm kernels on the host match LayerNorm, forward and backward, with dx over dy") {
  const int rows = 40, cols = 72; // whole warps: every thread of a block shuffles (host_sim.hpp)
  const auto x = random_vec(rows * cols, 21, -3.f, 3.f), w = random_vec(cols, 22, 0.5f, 1.5f);
  const auto b = random_vec(cols, 23), dy = random_vec(rows * cols, 24);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx = dy, dw(cols, 0.5f), db(cols, 0.25f);
  std::vector<float> part(2 * ln_slices * cols);
  const dim3 row_grid(rows / warps_per_block);
  gwsim::launch(row_grid, row_block_threads, [&] {
    layernorm_fwd(x.data(), y.data(), mean.data(), rstd.data(), w.data(), b.data(), rows, cols, 1e-5f);
  });
  gwsim::launch(dim3(1, ln_slices), 128, [&] {
    layernorm_bwd_partials(x.data(), dx.data(), mean.data(), rstd.data(), part.data(), rows, cols);
  });
  gwsim::launch(dim3(1), 128, [&] { layernorm_bwd_params(part.data(), dw.data(), db.data(), cols); });
  gwsim::launch(row_grid, row_block_threads, [&] {
    layernorm_bwd_rows(x.data(), dx.data(), mean.data(), rstd.data(), w.data(), dx.data(), rows, cols);
  });
  std::vector<double> ry(x.size()), rdx(x.size()), rdw(cols, 0.5), rdb(cols, 0.25);
  for (int i = 0; i < rows; ++i) {
    double mu = 0, var = 0, m1 = 0, m2 = 0;
    for (int j = 0; j < cols; ++j)
      mu += x[i * cols + j] / static_cast<double>(cols);
    for (int j = 0; j < cols; ++j)
      var += (x[i * cols + j] - mu) * (x[i * cols + j] - mu) / cols;
    const double r = 1 / std::sqrt(var + 1e-5);
    for (int j = 0; j < cols; ++j) {
      const double xh = (x[i * cols + j] - mu) * r, g = static_cast<double>(dy[i * cols + j]) * w[j];
      ry[i * cols + j] = xh * w[j] + b[j];
      m1 += g / cols;
      m2 += g * xh / cols;
      rdw[j] += dy[i * cols + j] * xh;
      rdb[j] += dy[i * cols + j];
    }
    for (int j = 0; j < cols; ++j)
      rdx[i * cols + j] = r * (static_cast<double>(dy[i * cols + j]) * w[j] - m1 - (x[i * cols + j] - mu) * r * m2);
  }
  CHECK(max_diff(y, ry) < 1e-5);
  CHECK(max_diff(dx, rdx) < 1e-5);
  CHECK(max_diff(dw, rdw) < 1e-4);
  CHECK(max_diff(db, rdb) < 1e-4);
}

TEST_CASE("CUDA GELU and embedding kernels on the host match their definitions, and flag the first bad token") {
  const std::size_t n = 1000;
  const auto x = random_vec(n, 31, -6.f, 6.f);
  std::vector<float> y(n), d(n, 1.f);
  gwsim::launch(dim3(2), 256, [&] { gelu_fwd(x.data(), y.data(), n); });
  gwsim::launch(dim3(2), 256, [&] { gelu_bwd(x.data(), d.data(), d.data(), n); });
  std::vector<double> ry(n), rd(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i], phi = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    ry[i] = v * phi;
    rd[i] = phi + v * std::exp(-v * v / 2) / std::sqrt(2 * M_PI);
  }
  CHECK(max_diff(y, ry) < 1e-5);
  CHECK(max_diff(d, rd) < 1e-5);

  const int batch = 3, time = 10, dim = 6, vocab = 7, rows = batch * time;
  auto tok = gwtest::random_tokens(rows, vocab, 41);
  const auto wte = random_vec(vocab * dim, 42), wpe = random_vec(time * dim, 43), dh = random_vec(rows * dim, 44);
  std::vector<float> h(rows * dim), dwte(wte.size(), 0.f), dwpe(wpe.size(), 0.f);
  int bad = 0x7fffffff;
  gwsim::launch(dim3(1), 64, [&] {
    embedding_fwd(tok.data(), wte.data(), wpe.data(), h.data(), rows, time, dim, vocab, &bad);
  });
  CHECK(bad == 0x7fffffff);
  gwsim::launch(dim3(1), 64, [&] { embedding_bwd_positions(dh.data(), dwpe.data(), batch, time, dim); });
  gwsim::launch(dim3(vocab), 32, [&] { embedding_bwd_tokens(tok.data(), dh.data(), dwte.data(), rows, dim); });
  std::vector<double> rh(h.size()), rte(wte.size()), rpe(wpe.size());
  for (int p = 0; p < rows; ++p)
    for (int j = 0; j < dim; ++j) {
      const int t = static_cast<int>(tok[p]);
      rh[p * dim + j] = static_cast<double>(wte[t * dim + j]) + wpe[(p % time) * dim + j];
      rte[t * dim + j] += dh[p * dim + j];
      rpe[(p % time) * dim + j] += dh[p * dim + j];
    }
  CHECK(max_diff(h, rh) < 1e-6);
  CHECK(max_diff(dwte, rte) < 1e-5);
  CHECK(max_diff(dwpe, rpe) < 1e-5);
  tok[17] = 7.f; // the vocabulary's size: out of range
  tok[23] = 2.5f;
  gwsim::launch(dim3(1), 64, [&] {
    embedding_fwd(tok.data(), wte.data(), wpe.data(), h.data(), rows, time, dim, vocab, &bad);
  });
  CHECK(bad == 17);
}

TEST_CASE("CUDA dropout kernel on the host draws the CPU's mask, bit for bit") {
  const int rows = 37, cols = 48;
  const float p = 0.3f;
  const auto x = random_vec(static_cast<std::size_t>(rows) * cols, 51);
  auto want = x, got = x;
  gradwire::kernels::backend_for(gradwire::kernels::device::cpu()).dropout(want.data(), rows, cols, p, 99, 5);
  gwsim::launch(dim3(3), 64, [&] {
    dropout_apply(got.data(), got.size(), gradwire::kernels::make_dropout_mask(p, 99), 5 * cols);
  });
  CHECK(got == want);
  CHECK(got != x);
}
