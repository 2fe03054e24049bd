// Activations in channel blocks ([n][c/B][h*w][B]): the layout change is
// exact both ways; BatchNorm on blocks gives NCHW's results (to the
// rounding of a different summation order); oneDNN's convolutions on
// blocked activations give the bits of their NCHW path, and so does the
// fallback through gradwire's kernels when oneDNN is off.
#include "kernels/backend.hpp"
#include "kernels/cpu/onednn_conv.hpp"
#include "reference.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace gradwire::kernels;
using gwtest::check_close;
using gwtest::cpu;
using gwtest::random_vec;

namespace {

/// The blocked copy of an NCHW tensor, by the layout's definition.
std::vector<float> blocked_by_index(const std::vector<float>& x, int n, int c, int hw, int b) {
  std::vector<float> out(x.size());
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch)
      for (int p = 0; p < hw; ++p)
        out[((static_cast<std::size_t>(i) * (c / b) + ch / b) * hw + p) * b + ch % b] =
          x[(static_cast<std::size_t>(i) * c + ch) * hw + p];
  return out;
}

std::vector<float> to_blocked(const std::vector<float>& x, int n, int c, int hw, int b) {
  std::vector<float> out(x.size());
  cpu().relayout(x.data(), out.data(), n, c, hw, b, true);
  return out;
}

std::vector<float> to_nchw(const std::vector<float>& x, int n, int c, int hw, int b) {
  std::vector<float> out(x.size());
  cpu().relayout(x.data(), out.data(), n, c, hw, b, false);
  return out;
}
} // namespace

TEST_CASE("blocked activations: the layout change is the layout's definition and exact both ways") {
  for (int b : {8, 16})
    for (int hw : {1, 35, 64}) { // odd planes: the transposes' tails
      INFO("block " << b << ", plane " << hw);
      const int n = 3, c = 2 * b;
      const auto x = random_vec(static_cast<std::size_t>(n) * c * hw, 5);
      const auto blocked = to_blocked(x, n, c, hw, b);
      CHECK(blocked == blocked_by_index(x, n, c, hw, b));
      CHECK(to_nchw(blocked, n, c, hw, b) == x);
    }
  std::vector<float> x(24), y(24);
  CHECK_THROWS_WITH(cpu().relayout(x.data(), y.data(), 1, 12, 2, 8, true),
                    Catch::Contains("12 channels in blocks of 8"));
}

TEST_CASE("blocked activations: BatchNorm on blocks gives NCHW's statistics and outputs and gradients") {
  for (int b : {8, 16})
    for (int hw : {37, 1})
      for (bool relu : {false, true}) {
        INFO("block " << b << ", plane " << hw << ", relu " << relu);
        const int n = 3, c = 2 * b;
        const auto total = static_cast<std::size_t>(n) * c * hw;
        const auto cs = static_cast<std::size_t>(c);
        const auto x = random_vec(total, 31, -2.f, 3.f), dy = random_vec(total, 32);
        const auto gamma = random_vec(cs, 33, 0.5f, 1.5f), beta = random_vec(cs, 34);
        std::vector<float> y(total), yb(total), m(cs), mb(cs), is(cs), isb(cs);
        std::vector<float> rm(cs, 0.1f), rv(cs, 1.f), rmb = rm, rvb = rv;
        cpu().batchnorm_forward_train(x.data(), y.data(), n, c, hw, gamma.data(), beta.data(), m.data(), is.data(),
                                      rm.data(), rv.data(), 0.1f, 1e-5f, relu);
        const auto xb = to_blocked(x, n, c, hw, b), dyb = to_blocked(dy, n, c, hw, b);
        cpu().batchnorm_forward_train_blocked(xb.data(), yb.data(), n, c, hw, b, gamma.data(), beta.data(), mb.data(),
                                              isb.data(), rmb.data(), rvb.data(), 0.1f, 1e-5f, relu);
        check_close(mb, m, 1e-5, 1e-6);
        check_close(isb, is, 1e-5, 1e-6);
        check_close(rmb, rm, 1e-5, 1e-6);
        check_close(rvb, rv, 1e-5, 1e-6);
        check_close(to_nchw(yb, n, c, hw, b), y, 1e-4, 1e-5);

        std::vector<float> dx(total), dxb(total), dg(cs, 0.5f), db(cs, 0.5f), dgb = dg, dbb = db;
        cpu().batchnorm_backward(x.data(), dy.data(), dx.data(), n, c, hw, gamma.data(), m.data(), is.data(),
                                 dg.data(), db.data(), relu ? y.data() : nullptr);
        cpu().batchnorm_backward_blocked(xb.data(), dyb.data(), dxb.data(), n, c, hw, b, gamma.data(), m.data(),
                                         is.data(), dgb.data(), dbb.data(), relu ? to_blocked(y, n, c, hw, b).data()
                                                                                 : nullptr);
        check_close(dgb, dg, 1e-4, 1e-5);
        check_close(dbb, db, 1e-4, 1e-5);
        check_close(to_nchw(dxb, n, c, hw, b), dx, 1e-4, 1e-5);

        std::vector<float> e(total), eb(total);
        cpu().batchnorm_forward_eval(x.data(), e.data(), n, c, hw, gamma.data(), beta.data(), rm.data(), rv.data(),
                                     1e-5f, relu);
        cpu().batchnorm_forward_eval_blocked(xb.data(), eb.data(), n, c, hw, b, gamma.data(), beta.data(), rm.data(),
                                             rv.data(), 1e-5f, relu);
        CHECK(to_nchw(eb, n, c, hw, b) == e); // no sums: the same bits
      }
}

TEST_CASE("blocked activations: a convolution on blocks gives its NCHW path's bits through oneDNN or without it") {
  // ResNet's shapes: 3x3 at stride 1 and 2, and the 1x1 shortcut.
  const int block = cpu().activation_block();
  if (block == 0) {
    WARN("no blocked activations on this build and machine (" << onednn_conv::status() << ")");
    return;
  }
  CHECK(cpu().conv_takes_block(16, 32, block));
  CHECK_FALSE(cpu().conv_takes_block(3, 16, block)); // the stem: gradwire's own kernels, NCHW
  for (bool onednn : {true, false}) {
    for (auto [c, hw, k, r, stride, pad] : {std::array<int, 6>{16, 12, 16, 3, 1, 1}, {16, 12, 32, 3, 2, 1},
                                            {16, 12, 32, 1, 2, 0}}) {
      INFO("oneDNN " << onednn << ": " << c << " channels of " << hw << "x" << hw << " to " << k << ", " << r << "x"
                     << r << " stride " << stride);
      conv_geom g;
      g.n = 2; g.c = c; g.h = g.w = hw; g.k = k; g.r = g.s = r; g.stride = stride; g.pad = pad;
      conv_geom gb = g;
      gb.block = block;
      const int ihw = hw * hw, ohw = g.out_h() * g.out_w();
      const auto x = random_vec(static_cast<std::size_t>(g.n) * c * ihw, 41);
      const auto w = random_vec(static_cast<std::size_t>(k) * c * r * r, 42);
      const auto dy = random_vec(static_cast<std::size_t>(g.n) * k * ohw, 43);
      onednn_conv::set_enabled(onednn);
      std::vector<float> y(dy.size()), yb(dy.size()), dx(x.size()), dxb(x.size()), dw(w.size(), 0.f), dwb = dw;
      std::vector<char> ws(cpu().conv2d_workspace_bytes(g) + 64), wsb(cpu().conv2d_workspace_bytes(gb) + 64);
      cpu().conv2d_forward(g, x.data(), w.data(), y.data(), ws.data());
      cpu().conv2d_backward(g, x.data(), w.data(), dy.data(), dx.data(), dw.data(), ws.data());
      const auto xb = to_blocked(x, g.n, c, ihw, block), dyb = to_blocked(dy, g.n, k, ohw, block);
      cpu().conv2d_forward(gb, xb.data(), w.data(), yb.data(), wsb.data());
      cpu().conv2d_backward(gb, xb.data(), w.data(), dyb.data(), dxb.data(), dwb.data(), wsb.data());
      onednn_conv::set_enabled(true);
      CHECK(to_nchw(yb, g.n, k, ohw, block) == y);
      CHECK(to_nchw(dxb, g.n, c, ihw, block) == dx);
      CHECK(dwb == dw);
    }
  }
}
