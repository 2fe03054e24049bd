#include "kernels/cpu/direct_conv.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

// Drivers of the channel-vectorised kernels (channel_wgrad_isa.hpp,
// channel_conv_isa.hpp): they pad inputs, transpose between NCHW and the
// kernels' pixel-major layouts, and lay weights out tap-major.
//
// Workspace of channel_conv, in floats:
//   wt   [C*R*S][M] forward weights, or [M*R*S][C] flipped for the input gradient
//   in   one padded image: [C][H+2p][W+2p], or the output gradient [M][OH+2(R-1-p)][OW+2(S-1-p)]
//   outT one image's pixel-major result
// Workspace of channel_wgrad: a group of padded inputs, then their output
// gradients transposed to [OH*OW][M].

namespace gradwire::kernels::direct_conv {
namespace {

bool from_env(const char* name, const char* off) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != off;
}

/// GRADWIRE_WGRAD=rows / GRADWIRE_CONV=rows keep the row-vectorised kernels (A/B comparisons).
std::atomic<bool> g_wgrad{from_env("GRADWIRE_WGRAD", "rows")};
std::atomic<bool> g_conv{from_env("GRADWIRE_CONV", "rows")};

bool kernel_size_ok(const conv_geom& g) { return (g.s == 3 || g.s == 5) && g.out_h() > 0 && g.out_w() > 0; }

/// Bytes of padded input plus transposed output gradient per channel_wgrad
/// group: the group's data stays in L2 across the kernel's passes over it.
constexpr std::size_t cw_group_budget = 512u << 10;

struct cw_layout {
  int hp, wp;
  std::size_t x_img, dy_img; // floats per image
  int group;
};

cw_layout make_cw_layout(const conv_geom& g) {
  cw_layout l{};
  l.hp = g.h + 2 * g.pad;
  l.wp = g.w + 2 * g.pad;
  l.x_img = static_cast<std::size_t>(g.c) * l.hp * l.wp;
  l.dy_img = static_cast<std::size_t>(g.k) * g.out_h() * g.out_w();
  const std::size_t per_image = (l.x_img + l.dy_img) * sizeof(float);
  l.group = static_cast<int>(std::clamp<std::size_t>(cw_group_budget / per_image, 1, static_cast<std::size_t>(g.n)));
  return l;
}

/// dst[p][m] = src[m][p] for one image (pix pixels, m channels).
void to_pixel_major(const float* src, int m, int pix, float* dst) { current_isa()->transpose(src, m, pix, dst); }

/// dst[m][p] = src[p][m], the inverse.
void to_channel_major(const float* src, int m, int pix, float* dst) { current_isa()->transpose(src, pix, m, dst); }

struct cc_layout {
  std::size_t wt, in, out; // floats
};

cc_layout make_cc_layout(const conv_geom& g) {
  cc_layout l{};
  l.wt = static_cast<std::size_t>(g.c) * g.r * g.s * g.k;
  const std::size_t fwd_in = static_cast<std::size_t>(g.c) * (g.h + 2 * g.pad) * (g.w + 2 * g.pad);
  const std::size_t bwd_in = static_cast<std::size_t>(g.k) * (g.out_h() + 2 * (g.r - 1 - g.pad)) *
                             (g.out_w() + 2 * (g.s - 1 - g.pad));
  l.in = std::max(fwd_in, bwd_in);
  l.out = std::max(static_cast<std::size_t>(g.k) * g.out_h() * g.out_w(), static_cast<std::size_t>(g.c) * g.h * g.w);
  return l;
}

} // namespace

void set_channel_wgrad(bool on) { g_wgrad.store(on); }
void set_channel_conv(bool on) { g_conv.store(on); }

bool channel_wgrad_applies(const conv_geom& g) {
  // Not 1x1: there the padded copy and the transpose cost more than the few
  // FLOPs they serve (ResNet's projections: 10-33 GFLOP/s, im2col 71-88).
  const auto* k = current_isa();
  return g_wgrad.load() && enabled() && k != nullptr && k->channel_wgrad != nullptr && g.k % k->lanes == 0 &&
         kernel_size_ok(g);
}

// Forward and input gradient: only where the row kernels do not apply
// (stride 2, rows of at most half a register). Where both apply the rows
// were faster: ResNet-20's 32x32 and 16x16 stages, 93 and 92 GFLOP/s forward
// against 60 and 73 here (bench/RESULTS.md, "Convolutions").
bool channel_forward_applies(const conv_geom& g) {
  const auto* k = current_isa();
  return g_conv.load() && enabled() && k != nullptr && k->channel_conv != nullptr && g.k % k->lanes == 0 &&
         kernel_size_ok(g) && !applies(g);
}

bool channel_input_grad_applies(const conv_geom& g) {
  const auto* k = current_isa();
  return g_conv.load() && enabled() && k != nullptr && k->channel_conv != nullptr && g.c % k->lanes == 0 &&
         kernel_size_ok(g) && g.stride == 1 && g.pad <= g.r - 1 && g.pad <= g.s - 1 && !applies(g);
}

std::size_t channel_wgrad_workspace_bytes(const conv_geom& g) {
  const auto l = make_cw_layout(g);
  return static_cast<std::size_t>(l.group) * (l.x_img + l.dy_img) * sizeof(float);
}

void channel_wgrad(const conv_geom& g, const float* x, const float* dy, float* dw, float* ws) {
  const auto l = make_cw_layout(g);
  float* xp = ws;
  float* dyT = ws + static_cast<std::size_t>(l.group) * l.x_img;
  const std::size_t in_img = static_cast<std::size_t>(g.c) * g.h * g.w;
  const int pix = g.out_h() * g.out_w();
  cw_args a;
  a.xp = xp, a.x_img = static_cast<std::ptrdiff_t>(l.x_img), a.c = g.c, a.hp = l.hp, a.wp = l.wp;
  a.dyT = dyT, a.m = g.k, a.oh = g.out_h(), a.ow = g.out_w(), a.stride = g.stride;
  a.r = g.r, a.s = g.s, a.dw = dw;
  for (int i0 = 0; i0 < g.n; i0 += l.group) {
    a.images = std::min(l.group, g.n - i0);
    for (int j = 0; j < a.images; ++j) {
      pad_planes(x + (i0 + j) * in_img, g.c, g.h, g.w, xp + j * l.x_img, l.hp, l.wp, g.pad, g.pad, 0);
      to_pixel_major(dy + (i0 + j) * l.dy_img, g.k, pix, dyT + j * l.dy_img);
    }
    current_isa()->channel_wgrad(a);
  }
}

std::size_t channel_conv_workspace_bytes(const conv_geom& g) {
  const auto l = make_cc_layout(g);
  return (l.wt + l.in + l.out) * sizeof(float);
}

void channel_forward(const conv_geom& g, const float* x, const float* w, float* y, float* ws) {
  const auto l = make_cc_layout(g);
  float* wt = ws;
  float* in = wt + l.wt;
  float* outT = in + l.in;
  forward_weights(g, w, wt);
  cc_args a;
  a.in = in, a.c = g.c, a.hp = g.h + 2 * g.pad, a.wp = g.w + 2 * g.pad, a.wt = wt;
  a.m = g.k, a.r = g.r, a.s = g.s, a.stride = g.stride, a.oh = g.out_h(), a.ow = g.out_w(), a.outT = outT;
  const std::size_t in_img = static_cast<std::size_t>(g.c) * g.h * g.w;
  const int pix = a.oh * a.ow;
  for (int i = 0; i < g.n; ++i) {
    pad_planes(x + i * in_img, g.c, g.h, g.w, in, a.hp, a.wp, g.pad, g.pad, 0);
    current_isa()->channel_conv(a);
    to_channel_major(outT, g.k, pix, y + static_cast<std::size_t>(i) * g.k * pix);
  }
}

void channel_input_grad(const conv_geom& g, const float* w, const float* dy, float* dx, float* ws) {
  const auto l = make_cc_layout(g);
  float* wt = ws;
  float* in = wt + l.wt;
  float* outT = in + l.in;
  // dx = valid correlation of dy (padded by R-1-p, S-1-p) with the flipped weights.
  input_grad_weights(g, w, wt);
  const int oh = g.out_h(), ow = g.out_w();
  cc_args a;
  a.in = in, a.c = g.k, a.hp = oh + 2 * (g.r - 1 - g.pad), a.wp = ow + 2 * (g.s - 1 - g.pad), a.wt = wt;
  a.m = g.c, a.r = g.r, a.s = g.s, a.stride = 1, a.oh = g.h, a.ow = g.w, a.outT = outT;
  const std::size_t out_img = static_cast<std::size_t>(g.k) * oh * ow;
  const int pix = g.h * g.w;
  for (int i = 0; i < g.n; ++i) {
    pad_planes(dy + i * out_img, g.k, oh, ow, in, a.hp, a.wp, g.r - 1 - g.pad, g.s - 1 - g.pad, 0);
    current_isa()->channel_conv(a);
    to_channel_major(outT, g.c, pix, dx + static_cast<std::size_t>(i) * g.c * pix);
  }
}

} // namespace gradwire::kernels::direct_conv
