// Gradient compression (models/compress.hpp): error feedback conserves
// mass, payloads have the stated sizes, a hostile payload is refused, and
// PowerSGD recovers a matrix of its rank.
#include "models/compress.hpp"
#include "models/compressed_gossip.hpp"
#include "models/layers/layers.hpp"
#include "models/model.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace gradwire;
using namespace gradwire::models;

namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = normal(rng);
  return v;
}

compress_spec spec_of(compress_mode m, double ratio = 0.05) {
  compress_spec s;
  s.mode = m;
  s.ratio = ratio;
  s.seed = 7;
  return s;
}

} // namespace

TEST_CASE("compress: error feedback conserves mass, exactly for top-k and random-k", "[compress]") {
  const std::size_t n = 1001;
  for (auto m : {compress_mode::topk, compress_mode::randk, compress_mode::bf16, compress_mode::sign,
                 compress_mode::int8}) {
    INFO(compress_name(m));
    compressor c(spec_of(m), n);
    for (int step = 0; step < 5; ++step) {
      const auto g = random_values(n, 100 + static_cast<std::uint64_t>(step));
      const auto old = c.residual();
      const auto payload = c.encode(g.data(), step, 3);
      std::vector<float> sent(n, 0.f);
      c.accumulate(payload.data(), payload.size(), 1.f, sent.data());
      for (std::size_t i = 0; i < n; ++i) {
        const float in = g[i] + old[i], out = sent[i] + c.residual()[i];
        if (m == compress_mode::topk || m == compress_mode::randk)
          REQUIRE(out == in);
        else
          REQUIRE(std::fabs(out - in) <= 1e-6f * (1.f + std::fabs(in)));
      }
    }
  }
}

TEST_CASE("compress: without error feedback the residual stays zero", "[compress]") {
  auto s = spec_of(compress_mode::topk);
  s.error_feedback = false;
  compressor c(s, 300);
  const auto g = random_values(300, 1);
  c.encode(g.data(), 0, 0);
  for (float e : c.residual())
    REQUIRE(e == 0.f);
}

TEST_CASE("compress: the compression error is what the payload did not carry, with or without feedback",
          "[compress]") {
  // Top-k of 1 of 4: -2 is sent; 1 and 0.5 are held back: 1.25 of 5.25.
  const std::vector<float> g = {1.f, -2.f, 0.5f, 0.f};
  for (bool ef : {true, false}) {
    INFO("error feedback " << ef);
    auto s = spec_of(compress_mode::topk, 0.25);
    s.error_feedback = ef;
    compressor c(s, g.size());
    c.encode(g.data(), 0, 0);
    REQUIRE(c.last_energy().held == 1.25);
    REQUIRE(c.last_energy().total == 5.25);
    // The second step compresses g plus the residual with feedback, [2, -2, 1, 0]: 2 is
    // sent (the lower index of a tie) and 5 of 9 held back; without, g alone again.
    c.encode(g.data(), 1, 0);
    REQUIRE(c.last_energy().ratio() == (ef ? 5.0 / 9.0 : 1.25 / 5.25));
  }
  // Every mode, against the payload decoded: held = ||c - D(C(c))||^2.
  const std::size_t n = 777;
  const auto v = random_values(n, 11);
  for (auto m : {compress_mode::bf16, compress_mode::randk, compress_mode::sign, compress_mode::int8}) {
    INFO(compress_name(m));
    compressor c(spec_of(m), n);
    const auto words = c.encode(v.data(), 0, 1);
    std::vector<float> d(n, 0.f);
    c.accumulate(words.data(), words.size(), 1.f, d.data());
    double held = 0, total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      held += (static_cast<double>(v[i]) - d[i]) * (static_cast<double>(v[i]) - d[i]);
      total += static_cast<double>(v[i]) * v[i];
    }
    REQUIRE(c.last_energy().total == Approx(total).epsilon(1e-12));
    REQUIRE(c.last_energy().held == Approx(held).epsilon(1e-5));
    REQUIRE(c.last_energy().ratio() < 1.0);
  }
  REQUIRE(compress_energy{}.ratio() == 0.0);
}

TEST_CASE("compress: payload sizes follow the formulas", "[compress]") {
  const std::size_t n = 1001;
  const auto g = random_values(n, 2);
  const struct {
    compress_mode mode;
    std::size_t words;
  } cases[] = {{compress_mode::bf16, 501}, {compress_mode::topk, 1 + 2 * 51}, {compress_mode::randk, 1 + 2 * 51},
               {compress_mode::sign, 1 + 32}, {compress_mode::int8, 4 + 251}};
  for (const auto& k : cases) {
    INFO(compress_name(k.mode));
    compressor c(spec_of(k.mode), n);
    REQUIRE(c.encode(g.data(), 0, 0).size() == k.words);
    REQUIRE(payload_words(spec_of(k.mode), n) == k.words);
  }
  REQUIRE(kept_count(0.01, 100) == 1);
  REQUIRE(kept_count(1e-9, 100) == 1);
  REQUIRE(kept_count(1.0, 100) == 100);
}

TEST_CASE("compress: top-k keeps the largest magnitudes, ties to the lower index", "[compress]") {
  std::vector<float> g = {0.5f, -3.f, 2.f, 3.f, -0.1f, 1.f};
  compressor c(spec_of(compress_mode::topk, 0.5), g.size());
  const auto p = c.encode(g.data(), 0, 0);
  REQUIRE(p == std::vector<std::uint32_t>{3u, 1u, 2u, 3u, 0xc0400000u, 0x40000000u, 0x40400000u});
}

TEST_CASE("compress: random-k draws follow the seed, step and rank", "[compress]") {
  const auto g = random_values(500, 3);
  compressor a(spec_of(compress_mode::randk), 500), b(spec_of(compress_mode::randk), 500);
  REQUIRE(a.encode(g.data(), 4, 1) == b.encode(g.data(), 4, 1));
  REQUIRE(a.encode(g.data(), 5, 1) != b.encode(g.data(), 5, 2));
}

TEST_CASE("compress: a malformed payload is refused before anything is written", "[compress]") {
  compressor c(spec_of(compress_mode::topk, 0.01), 300); // k = 3
  std::vector<float> out(300, 0.f);
  const auto refuse = [&](std::vector<std::uint32_t> p, const char* what) {
    INFO(what);
    REQUIRE_THROWS_AS(c.accumulate(p.data(), p.size(), 1.f, out.data()), error);
  };
  refuse({3u, 0u, 1u, 2u, 0u, 0u}, "short");
  refuse({2u, 0u, 1u, 2u, 0u, 0u, 0u}, "a count that is not k");
  refuse({3u, 0u, 1u, 300u, 0u, 0u, 0u}, "an index past the end");
  refuse({3u, 5u, 5u, 9u, 0u, 0u, 0u}, "a repeated index");
  refuse({3u, 9u, 5u, 7u, 0u, 0u, 0u}, "indices not ascending");
  for (float v : out)
    REQUIRE(v == 0.f);
}

TEST_CASE("compress: int8 rounds each value to its block's scale, and refuses a bad scale", "[compress]") {
  const std::size_t n = 600; // blocks of 256, 256 and 88
  auto g = random_values(n, 9);
  g[300] = 40.f; // the second block's scale is 40 / 127
  auto s = spec_of(compress_mode::int8);
  s.error_feedback = false;
  compressor c(s, n);
  const auto p = c.encode(g.data(), 0, 0);
  REQUIRE(p.size() == 3 + 150);
  std::vector<float> back(n, 0.f);
  c.accumulate(p.data(), p.size(), 1.f, back.data());
  for (std::size_t b = 0; b < 3; ++b) {
    float m = 0.f;
    for (std::size_t i = b * 256; i < std::min(n, b * 256 + 256); ++i)
      m = std::max(m, std::fabs(g[i]));
    for (std::size_t i = b * 256; i < std::min(n, b * 256 + 256); ++i)
      REQUIRE(std::fabs(back[i] - g[i]) <= 0.5f * m / 127.f * (1.f + 1e-5f));
  }
  REQUIRE(back[300] == Approx(40.f).epsilon(1e-6));
  std::vector<float> out(n, 0.f);
  for (float bad : {std::nanf(""), -1.f, std::numeric_limits<float>::infinity()}) {
    auto q = p;
    std::memcpy(&q[1], &bad, sizeof bad);
    REQUIRE_THROWS_WITH(c.accumulate(q.data(), q.size(), 1.f, out.data()), Catch::Contains("block 1 has the scale"));
  }
  REQUIRE_THROWS(c.accumulate(p.data(), p.size() - 1, 1.f, out.data()));
  for (float v : out)
    REQUIRE(v == 0.f);
}

TEST_CASE("compress: PowerSGD recovers a matrix of its rank and sends small blocks whole", "[compress]") {
  const std::size_t rows = 40, cols = 30, r = 2;
  // M = a b^T of rank 2, then a bias of 5 values sent whole.
  const auto a = random_values(rows * r, 4), b = random_values(cols * r, 5), bias = random_values(5, 6);
  std::vector<float> g(rows * cols + 5);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      g[i * cols + j] = a[i * r] * b[j * r] + a[i * r + 1] * b[j * r + 1];
  std::copy(bias.begin(), bias.end(), g.begin() + rows * cols);
  auto s = spec_of(compress_mode::powersgd);
  s.rank = 2;
  powersgd p(s, {{0, rows, cols}, {rows * cols, 1, 5}}, g.size());
  REQUIRE(p.first_floats() == rows * r + 5);
  REQUIRE(p.second_floats() == cols * r);
  // One worker: its sums are its own payloads.
  std::vector<float> out(g.size());
  p.finish(p.second_payload(p.first_payload(g.data())), 1.f, out.data());
  for (std::size_t i = 0; i < g.size(); ++i) {
    REQUIRE(std::fabs(out[i] - g[i]) <= 1e-4f * (1.f + std::fabs(g[i])));
    REQUIRE(std::fabs(out[i] + p.residual()[i] - g[i]) <= 1e-5f * (1.f + std::fabs(g[i]))); // mass kept
  }
  // A matrix of its rank is carried whole; the bias is sent whole.
  REQUIRE(p.last_energy().held <= 1e-6 * p.last_energy().total);
  // A full-rank matrix is not: what is held back is its residual's energy.
  const auto noise = random_values(rows * cols + 5, 8);
  p.finish(p.second_payload(p.first_payload(noise.data())), 1.f, out.data());
  double held = 0;
  for (float e : p.residual())
    held += static_cast<double>(e) * e;
  REQUIRE(p.last_energy().held == Approx(held).epsilon(1e-6));
  REQUIRE(p.last_energy().ratio() > 0.5);
  REQUIRE(p.last_energy().ratio() < 1.0);
}

TEST_CASE("compress: PowerSGD over three workers averages their low-rank parts alike", "[compress]") {
  const std::size_t rows = 16, cols = 12, n = rows * cols;
  auto s = spec_of(compress_mode::powersgd);
  s.rank = 1;
  std::vector<powersgd> w;
  std::vector<std::vector<float>> g;
  for (int k = 0; k < 3; ++k) {
    w.emplace_back(s, std::vector<matrix_block>{{0, rows, cols}}, n);
    g.push_back(random_values(n, 10 + static_cast<std::uint64_t>(k)));
  }
  const auto sum_of = [&](auto payload) {
    std::vector<float> sum;
    for (int k = 0; k < 3; ++k) {
      const auto v = payload(k);
      sum.resize(v.size(), 0.f);
      for (std::size_t i = 0; i < v.size(); ++i)
        sum[i] += v[i];
    }
    return sum;
  };
  const auto first = sum_of([&](int k) { return w[static_cast<std::size_t>(k)].first_payload(g[static_cast<std::size_t>(k)].data()); });
  const auto second = sum_of([&](int k) { return w[static_cast<std::size_t>(k)].second_payload(first); });
  std::vector<std::vector<float>> out(3, std::vector<float>(n));
  for (std::size_t k = 0; k < 3; ++k)
    w[k].finish(second, 1.f / 3, out[k].data());
  REQUIRE(out[0] == out[1]);
  REQUIRE(out[1] == out[2]);
  // The residuals carry what the sum dropped: mean(g) = out + mean(e), to rounding.
  for (std::size_t i = 0; i < n; ++i) {
    const float mean = (g[0][i] + g[1][i] + g[2][i]) / 3, kept = out[0][i] + (w[0].residual()[i] + w[1].residual()[i] + w[2].residual()[i]) / 3;
    REQUIRE(std::fabs(mean - kept) <= 1e-5f);
  }
}

TEST_CASE("compress: PowerSGD's blocks come from the model's tensors", "[compress]") {
  model_spec spec;
  spec.hidden = {32};
  const model m(spec, kernels::device::cpu(), 1);
  const auto blocks = matrix_blocks(layout_of(spec), m.size());
  std::size_t at = 0, matrices = 0;
  for (const auto& b : blocks) { // in order, covering the buffer, padding included
    REQUIRE(b.offset == at);
    at += b.rows * b.cols;
    matrices += b.rows > 1;
  }
  REQUIRE(at == m.size());
  REQUIRE(matrices == 2);
  REQUIRE(blocks[0].rows == 32);
  REQUIRE(blocks[0].cols == 784);
}

TEST_CASE("compress: mode names round-trip and unknown ones are refused", "[compress]") {
  for (auto m : {compress_mode::none, compress_mode::bf16, compress_mode::topk, compress_mode::randk,
                 compress_mode::sign, compress_mode::powersgd, compress_mode::int8})
    REQUIRE(compress_mode_of(compress_name(m)) == m);
  REQUIRE_FALSE(compress_mode_of("zip").has_value());
}

TEST_CASE("compressed gossip: CHOCO's own estimate is what its neighbours rebuild from its payloads", "[compress]") {
  // Worker 0 sends its payloads to worker 1, which keeps x^_0 from them:
  // after any number of steps both sides hold the same x^_0, bit for bit.
  const std::size_t n = 500;
  auto spec = spec_of(compress_mode::topk, 0.1);
  compressed_gossip a(spec, gossip_rule::choco, 0.f, n, {1}), b(spec, gossip_rule::choco, 0.f, n, {0});
  for (int step = 0; step < 5; ++step) {
    const auto xa = random_values(n, 100 + static_cast<std::uint64_t>(step));
    auto xb = random_values(n, 200 + static_cast<std::uint64_t>(step));
    const auto qa = a.payload(xa.data(), step, 0);
    b.payload(xb.data(), step, 1);
    b.mix(xb.data(), {0}, {&qa}, {0.5f, 0.5f});
  }
  const auto sa = a.saved(), sb = b.saved(); // own, then the neighbours'
  REQUIRE(sa.size() == 2 * n);
  CHECK(std::vector<float>(sa.begin(), sa.begin() + n) == std::vector<float>(sb.begin() + n, sb.end()));
  CHECK(consensus_step(spec) == Approx(0.2f));
  // A checkpoint's estimates come back whole, and a wrong size is refused.
  compressed_gossip c(spec, gossip_rule::choco, 0.f, n, {1});
  c.restore(sa);
  CHECK(c.saved() == sa);
  CHECK_THROWS_WITH(c.restore(std::vector<float>(n)), Catch::Contains("1000"));
}

TEST_CASE("compressed gossip: a malformed payload is refused naming its rank before x changes", "[compress]") {
  const std::size_t n = 64;
  auto spec = spec_of(compress_mode::topk, 0.25);
  compressed_gossip g(spec, gossip_rule::choco, 0.5f, n, {1, 2});
  auto x = random_values(n, 7);
  const auto before = x;
  std::vector<std::uint32_t> good(payload_words(spec, n), 0u), bad = good;
  good[0] = bad[0] = 16;
  for (std::uint32_t i = 0; i < 16; ++i)
    good[1 + i] = bad[1 + i] = i;
  bad[16] = 99; // past the 64 values
  CHECK_THROWS_WITH(g.mix(x.data(), {1, 2}, {&good, &bad}, {0.25f, 0.25f, 0.5f}), Catch::Contains("rank 2"));
  CHECK(x == before);
  CHECK_THROWS_WITH(g.mix(x.data(), {1, 3}, {&good, &good}, {0.25f, 0.25f, 0.5f}), Catch::Contains("rank 3"));
  CHECK(x == before);
}
