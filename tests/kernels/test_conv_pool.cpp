// Convolution and pooling against direct (naive) implementations.
#include "kernels/backend.hpp"
#include "kernels/cpu/direct_conv.hpp"
#include "kernels/cpu/onednn_conv.hpp"
#include "reference.hpp"

#include <catch2/catch.hpp>

#include <array>

using namespace gradwire::kernels;
using gwtest::check_close;
using gwtest::cpu;
using gwtest::random_vec;

namespace {

std::vector<conv_geom> geometries() {
  auto make = [](int n, int c, int h, int w, int k, int r, int stride, int pad) {
    conv_geom g;
    g.n = n; g.c = c; g.h = h; g.w = w; g.k = k; g.r = g.s = r; g.stride = stride; g.pad = pad;
    return g;
  };
  return {make(2, 1, 7, 7, 3, 3, 1, 1), make(3, 2, 9, 6, 4, 5, 1, 2), make(2, 3, 8, 8, 5, 3, 2, 1),
          make(1, 4, 5, 5, 2, 1, 1, 0), make(2, 3, 6, 7, 3, 1, 2, 0), make(2, 2, 5, 5, 3, 5, 1, 0),
          // Direct-kernel shapes: uneven channel blocks, rows of 2 to 2 registers
          // and a partial one, wide and tall images, more output than input channels.
          make(2, 7, 4, 4, 19, 3, 1, 1), make(3, 5, 2, 2, 33, 3, 1, 1), make(1, 3, 6, 30, 5, 3, 1, 1),
          make(2, 2, 17, 5, 3, 3, 1, 0), make(1, 6, 10, 10, 16, 5, 1, 0),
          // The channel-vectorised weight gradient: stride 2 with 48 output
          // channels (blocks of 2 registers and of 1), channels not a multiple
          // of its block, 5x5 (kernel rows split on AVX2), no padding.
          make(2, 4, 9, 9, 48, 3, 2, 1), make(2, 5, 7, 6, 16, 5, 1, 2), make(2, 2, 6, 6, 32, 3, 1, 0)};
}
} // namespace

/// One convolution's forward and backward (both gradients) on the path in use.
struct conv_result {
  std::vector<float> y, dx, dw;
};

conv_result run_conv(const conv_geom& g, const std::vector<float>& x, const std::vector<float>& w,
                     const std::vector<float>& dy) {
  conv_result r{std::vector<float>(dy.size()), std::vector<float>(x.size()), std::vector<float>(w.size(), 0.f)};
  std::vector<char> ws(cpu().conv2d_workspace_bytes(g));
  cpu().conv2d_forward(g, x.data(), w.data(), r.y.data(), ws.data());
  cpu().conv2d_backward(g, x.data(), w.data(), dy.data(), r.dx.data(), r.dw.data(), ws.data());
  return r;
}

/// Two paths' results agree (the weight gradient sums over the batch: larger magnitudes).
void check_agree(const conv_result& a, const conv_result& b) {
  check_close(a.y, b.y, 1e-4, 1e-4);
  check_close(a.dx, b.dx, 1e-4, 1e-4);
  check_close(a.dw, b.dw, 1e-3, 1e-3);
}

/// The instruction sets whose direct kernels this CPU can run, then "" (the
/// im2col + GEMM path alone), so that every kernel is checked here.
std::vector<std::string> conv_paths() {
  std::vector<std::string> paths;
  for (const char* isa : {"avx512", "avx2"})
    if (direct_conv::use_isa(isa))
      paths.push_back(isa);
  paths.push_back("");
  return paths;
}

/// An n x c x hw x hw input, k filters of r x r.
conv_geom square_conv(int n, int c, int hw, int k, int r, int stride, int pad) {
  conv_geom g;
  g.n = n; g.c = c; g.h = g.w = hw; g.k = k; g.r = g.s = r; g.stride = stride; g.pad = pad;
  return g;
}

/// Random x, w and dy for `g`, from seeds seed, seed + 1, seed + 2.
std::array<std::vector<float>, 3> conv_inputs(const conv_geom& g, unsigned seed) {
  return {random_vec(static_cast<std::size_t>(g.n) * g.c * g.h * g.w, seed),
          random_vec(static_cast<std::size_t>(g.k) * g.c * g.r * g.s, seed + 1),
          random_vec(static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w(), seed + 2)};
}

/// Whether this build and machine run convolutions through oneDNN (a test warns and ends when not).
bool onednn_in_build() {
  if (onednn_conv::serves(square_conv(1, 16, 8, 16, 3, 1, 1)))
    return true;
  WARN("oneDNN's convolutions are not in this build (" << onednn_conv::status() << ")");
  return false;
}

/// Selects a path of gradwire's own for one scope (oneDNN off); back to the
/// CPU's best on exit.
struct conv_path {
  explicit conv_path(const std::string& isa) {
    onednn_conv::set_enabled(false);
    direct_conv::set_width_rule(false); // every width through the kernels under test
    direct_conv::set_enabled(!isa.empty());
    if (!isa.empty())
      direct_conv::use_isa(isa.c_str());
  }
  ~conv_path() {
    onednn_conv::set_enabled(true);
    direct_conv::set_width_rule(true);
    direct_conv::set_enabled(true);
    direct_conv::use_isa("default");
  }
};

TEST_CASE("conv2d forward matches direct convolution (stride, padding, 1x1, odd sizes)") {
  for (const auto& path : conv_paths())
  for (const auto& g : geometries()) {
    conv_path use(path);
    INFO("path " << (path.empty() ? "im2col" : path));
    INFO("n=" << g.n << " c=" << g.c << " h=" << g.h << " w=" << g.w << " k=" << g.k << " r=" << g.r
              << " stride=" << g.stride << " pad=" << g.pad);
    auto x = random_vec(static_cast<std::size_t>(g.n) * g.c * g.h * g.w, 1);
    auto w = random_vec(static_cast<std::size_t>(g.k) * g.c * g.r * g.s, 2);
    std::vector<float> y(static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w());
    std::vector<char> ws(cpu().conv2d_workspace_bytes(g) + 1);
    cpu().conv2d_forward(g, x.data(), w.data(), y.data(), ws.data());
    check_close(y, gwtest::ref_conv(g, x, w), 1e-4, 1e-5);
  }
}

TEST_CASE("conv2d backward equals the adjoint of forward") {
  // For a linear map y = A(x, w): <dy, A(dx_probe, w)> = <A^T dy, dx_probe>,
  // and the weight gradient likewise; checked against the direct reference.
  for (const auto& path : conv_paths())
  for (const auto& g : geometries()) {
    conv_path use(path);
    INFO("path " << (path.empty() ? "im2col" : path));
    INFO("k=" << g.k << " r=" << g.r << " stride=" << g.stride << " pad=" << g.pad);
    const auto xs = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
    const auto ws_n = static_cast<std::size_t>(g.k) * g.c * g.r * g.s;
    const auto ys = static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
    auto x = random_vec(xs, 3), w = random_vec(ws_n, 4), dy = random_vec(ys, 5);
    std::vector<float> dx(xs), dw(ws_n, 0.f);
    std::vector<char> ws(cpu().conv2d_workspace_bytes(g) + 1);
    std::vector<float> y(ys);
    cpu().conv2d_forward(g, x.data(), w.data(), y.data(), ws.data()); // backward may reuse its workspace
    cpu().conv2d_backward(g, x.data(), w.data(), dy.data(), dx.data(), dw.data(), ws.data());
    // <dy, conv(x, e_i)> for a unit vector e_i in the weights is dw[i]; in
    // the input, dx[i]: probe every element.
    auto probe = [&](std::size_t n, bool weights) {
      std::vector<double> out(n);
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<float> e(n, 0.f);
        e[i] = 1.f;
        auto yr = weights ? gwtest::ref_conv(g, x, e) : gwtest::ref_conv(g, e, w);
        double s = 0;
        for (std::size_t j = 0; j < ys; ++j)
          s += yr[j] * dy[j];
        out[i] = s;
      }
      return out;
    };
    auto dw_ref = probe(ws_n, true), dx_ref = probe(xs, false);
    check_close(dw, dw_ref, 1e-4, 1e-4);
    check_close(dx, dx_ref, 1e-4, 1e-4);
  }
}

TEST_CASE("max pooling forward picks the window maximum, backward routes to it") {
  pool_geom g;
  g.n = 2; g.c = 3; g.h = 7; g.w = 6; g.size = 3; g.stride = 2; // overlapping windows, odd size
  const auto xs = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
  const auto ys = static_cast<std::size_t>(g.n) * g.c * g.out_h() * g.out_w();
  auto x = random_vec(xs, 6);
  std::vector<float> y(ys), dx(xs);
  std::vector<std::int32_t> arg(ys);
  cpu().maxpool_forward(g, x.data(), y.data(), arg.data());
  std::vector<double> dx_ref(xs, 0.0);
  auto dy = random_vec(ys, 7);
  for (int p = 0; p < g.n * g.c; ++p)
    for (int oy = 0; oy < g.out_h(); ++oy)
      for (int ox = 0; ox < g.out_w(); ++ox) {
        float best = -1e30f;
        int bi = 0;
        for (int r = 0; r < g.size; ++r)
          for (int s = 0; s < g.size; ++s) {
            const int idx = (oy * g.stride + r) * g.w + ox * g.stride + s;
            if (x[static_cast<std::size_t>(p * g.h * g.w + idx)] > best) {
              best = x[static_cast<std::size_t>(p * g.h * g.w + idx)];
              bi = idx;
            }
          }
        const auto o = static_cast<std::size_t>((p * g.out_h() + oy) * g.out_w() + ox);
        CHECK(y[o] == best);
        dx_ref[static_cast<std::size_t>(p * g.h * g.w + bi)] += dy[o];
      }
  cpu().maxpool_backward(g, dy.data(), arg.data(), dx.data());
  check_close(dx, dx_ref, 1e-6, 1e-6);
}

TEST_CASE("global average pooling and its gradient") {
  const int n = 2, c = 3, hw = 10;
  auto x = random_vec(n * c * hw, 8);
  std::vector<float> y(n * c), dx(x.size());
  cpu().avgpool_global_forward(x.data(), y.data(), n, c, hw);
  for (int p = 0; p < n * c; ++p) {
    double s = 0;
    for (int i = 0; i < hw; ++i)
      s += x[static_cast<std::size_t>(p * hw + i)];
    CHECK(y[static_cast<std::size_t>(p)] == Approx(s / hw));
  }
  std::vector<float> dy = random_vec(n * c, 9);
  cpu().avgpool_global_backward(dy.data(), dx.data(), n, c, hw);
  CHECK(dx[5] == Approx(dy[0] / hw));
  CHECK(dx[static_cast<std::size_t>(n * c * hw - 1)] == Approx(dy[static_cast<std::size_t>(n * c - 1)] / hw));
}

TEST_CASE("conv2d: large batches (columns recomputed) equal small ones (columns cached)") {
  // 8 images of ResNet's first stage make ~4.7 MB of columns, over the cache
  // limit; 2 images stay under it. Both paths must give the same results.
  for (int stride : {1, 2}) {
    INFO("stride " << stride);
    conv_geom big;
    big.n = 8; big.c = 16; big.h = big.w = 32; big.k = 16; big.r = big.s = 3; big.stride = stride; big.pad = 1;
    conv_geom small = big;
    small.n = 2;
    const auto img = static_cast<std::size_t>(big.c) * big.h * big.w;
    const auto out_img = static_cast<std::size_t>(big.k) * big.out_h() * big.out_w();
    const auto wsz = static_cast<std::size_t>(big.k) * big.c * 9;
    auto x = random_vec(img * 8, 21), w = random_vec(wsz, 22), dy = random_vec(out_img * 8, 23);
    std::vector<float> y_big(out_img * 8), dx_big(img * 8), dw_big(wsz, 0.f);
    std::vector<char> ws_big(cpu().conv2d_workspace_bytes(big) + 1);
    cpu().conv2d_forward(big, x.data(), w.data(), y_big.data(), ws_big.data());
    cpu().conv2d_backward(big, x.data(), w.data(), dy.data(), dx_big.data(), dw_big.data(), ws_big.data());
    std::vector<float> y_small(out_img * 8), dx_small(img * 8), dw_small(wsz, 0.f);
    std::vector<char> ws_small(cpu().conv2d_workspace_bytes(small) + 1);
    for (int part = 0; part < 4; ++part) {
      const auto xo = img * 2 * static_cast<std::size_t>(part), yo = out_img * 2 * static_cast<std::size_t>(part);
      cpu().conv2d_forward(small, x.data() + xo, w.data(), y_small.data() + yo, ws_small.data());
      cpu().conv2d_backward(small, x.data() + xo, w.data(), dy.data() + yo, dx_small.data() + xo,
                            dw_small.data(), ws_small.data());
    }
    check_close(y_big, y_small, 1e-5, 1e-5);
    check_close(dx_big, dx_small, 1e-5, 1e-5);
    check_close(dw_big, dw_small, 1e-4, 1e-4);
  }
}

TEST_CASE("conv2d: direct kernels and im2col + GEMM agree (LeNet-5, ResNet stages, batch groups)") {
  if (!direct_conv::available()) {
    WARN("this CPU has neither AVX-512 nor AVX2 with FMA: only im2col + GEMM exists here");
    return;
  }
  for (const auto& isa : conv_paths()) {
  if (isa.empty())
    continue;
  INFO("direct kernels: " << isa);
  auto make = [](int n, int c, int h, int w, int k, int r, int pad) {
    conv_geom g;
    g.n = n; g.c = c; g.h = h; g.w = w; g.k = k; g.r = g.s = r; g.stride = 1; g.pad = pad;
    return g;
  };
  // LeNet-5's two layers at batch 64; ResNet-20's three stages (the first
  // with 20 images spans two groups of the weight-gradient pass).
  for (const auto& g : {make(64, 1, 28, 28, 6, 5, 2), make(64, 6, 14, 14, 16, 5, 0),
                        make(20, 16, 32, 32, 16, 3, 1), make(4, 32, 16, 16, 32, 3, 1),
                        make(4, 64, 8, 8, 64, 3, 1)}) {
    INFO("n=" << g.n << " c=" << g.c << " h=" << g.h << " k=" << g.k << " r=" << g.r << " pad=" << g.pad);
    const auto xs = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
    const auto wn = static_cast<std::size_t>(g.k) * g.c * g.r * g.s;
    const auto ys = static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
    auto x = random_vec(xs, 31), w = random_vec(wn, 32), dy = random_vec(ys, 33);
    auto run = [&](bool direct) {
      conv_path use(direct ? isa : "");
      REQUIRE(direct_conv::applies(g) == direct);
      // Output channels a multiple of 16 (of either register width): the channel-vectorised weight gradient.
      REQUIRE(direct_conv::channel_wgrad_applies(g) == (direct && g.k % 16 == 0));
      return run_conv(g, x, w, dy);
    };
    check_agree(run(true), run(false));
  }
  }
}

TEST_CASE("conv2d: channel-vectorised forward and input gradient agree with im2col + GEMM") {
  if (!direct_conv::available()) {
    WARN("this CPU has neither AVX-512 nor AVX2 with FMA: only im2col + GEMM exists here");
    return;
  }
  auto make = [](int n, int c, int hw, int k, int r, int stride, int pad) {
    conv_geom g;
    g.n = n; g.c = c; g.h = g.w = hw; g.k = k; g.r = g.s = r; g.stride = stride; g.pad = pad;
    return g;
  };
  for (const auto& isa : conv_paths()) {
    if (isa.empty())
      continue;
    INFO("direct kernels: " << isa);
    // 4-pixel rows fill at most half a register of either width, so the
    // default rule sends them to the channel kernels; 5x5 with a pixel tail;
    // stride 2 with 48 output channels (blocks of 2 registers and of 1).
    for (const auto& g : {make(3, 16, 4, 32, 3, 1, 1), make(2, 16, 4, 16, 5, 1, 2), make(2, 32, 9, 48, 3, 2, 1)}) {
      INFO("n=" << g.n << " c=" << g.c << " hw=" << g.h << " k=" << g.k << " r=" << g.r << " stride=" << g.stride);
      const auto xs = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
      const auto wn = static_cast<std::size_t>(g.k) * g.c * g.r * g.s;
      const auto ys = static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
      auto x = random_vec(xs, 41), w = random_vec(wn, 42), dy = random_vec(ys, 43);
      auto run = [&](bool channel) {
        onednn_conv::set_enabled(false);
        direct_conv::set_enabled(channel);
        if (channel)
          direct_conv::use_isa(isa.c_str());
        REQUIRE(direct_conv::channel_forward_applies(g) == channel);
        REQUIRE(direct_conv::channel_input_grad_applies(g) == (channel && g.stride == 1));
        auto r = run_conv(g, x, w, dy);
        direct_conv::set_enabled(true);
        direct_conv::use_isa("default");
        onednn_conv::set_enabled(true);
        return r;
      };
      check_agree(run(true), run(false));
    }
  }
}

TEST_CASE("conv2d: oneDNN's blocked primitives agree with im2col + GEMM and add into dw") {
  if (!onednn_in_build())
    return;
  const auto make = square_conv;
  // ResNet-20's layer kinds at small batches, odd sizes and channel counts
  // no multiple of 8 or 16.
  for (const auto& g : {make(3, 16, 9, 16, 3, 1, 1), make(2, 16, 11, 32, 3, 2, 1), make(2, 32, 10, 64, 1, 2, 0),
                        make(5, 20, 7, 17, 3, 1, 1), make(1, 64, 4, 64, 3, 1, 1)}) {
    INFO("n=" << g.n << " c=" << g.c << " hw=" << g.h << " k=" << g.k << " r=" << g.r << " stride=" << g.stride);
    const auto wn = static_cast<std::size_t>(g.k) * g.c * g.r * g.s;
    const auto ys = static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
    const auto in = conv_inputs(g, 51); // (named, not bound: lambdas capture them)
    const auto &x = in[0], &w = in[1], &dy = in[2];
    auto run = [&](bool onednn, std::vector<float>& dw_added) {
      conv_path use(""); // im2col + GEMM ...
      onednn_conv::set_enabled(onednn); // ... unless oneDNN takes the shape
      REQUIRE(onednn_conv::serves(g) == onednn);
      auto r = run_conv(g, x, w, dy);
      // dw accumulates (dw += dW), and dx may be skipped.
      std::vector<float> y(ys);
      dw_added.assign(wn, 0.5f);
      std::vector<char> ws(cpu().conv2d_workspace_bytes(g) + 1);
      cpu().conv2d_forward(g, x.data(), w.data(), y.data(), ws.data());
      cpu().conv2d_backward(g, x.data(), w.data(), dy.data(), nullptr, dw_added.data(), ws.data());
      return r;
    };
    std::vector<float> added_a, added_b;
    const auto a = run(true, added_a), b = run(false, added_b);
    check_agree(a, b);
    check_close(added_a, added_b, 1e-3, 1e-3);
    std::vector<float> plus_half = a.dw;
    for (auto& v : plus_half)
      v += 0.5f;
    check_close(added_a, plus_half, 1e-5, 1e-5);
  }
}

TEST_CASE("conv2d: activations moved by gradwire's transposes equal oneDNN's reorders bit for bit") {
  if (!onednn_in_build())
    return;
  const auto make = square_conv;
  // Channels in whole blocks of 8 and of 16 (the transposes' cases), planes
  // of pixels no multiple of 8 (their scalar tails), and a count that is no
  // block at all (oneDNN's reorder on both sides).
  for (const auto& g : {make(2, 16, 9, 16, 3, 1, 1), make(3, 32, 6, 48, 3, 2, 1), make(2, 64, 5, 64, 1, 1, 0),
                        make(2, 24, 7, 20, 3, 1, 1)}) {
    INFO("n=" << g.n << " c=" << g.c << " hw=" << g.h << " k=" << g.k << " stride=" << g.stride);
    const auto in = conv_inputs(g, 61); // (named, not bound: lambdas capture them)
    const auto &x = in[0], &w = in[1], &dy = in[2];
    auto run = [&](bool fast) {
      onednn_conv::set_fast_reorders(fast);
      REQUIRE(onednn_conv::serves(g));
      auto r = run_conv(g, x, w, dy);
      onednn_conv::set_fast_reorders(true);
      return r;
    };
    const auto a = run(true), b = run(false);
    CHECK(a.y == b.y);
    CHECK(a.dx == b.dx);
    CHECK(a.dw == b.dw);
  }
}
