#include "kernels/cpu/direct_conv.hpp"

#include "kernels/cpu/clones.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

// Workspace, in floats (lanes L = register width, T = L * max_regs tail):
//   wt_f  [C*R*S][M]          forward weights, tap-major
//   wt_b  [M*R*S][C]          input-gradient weights, flipped and tap-major
//   xp    G x ([C][H+2p][W+2p] + T)   zero-padded inputs of a group of G images
//   dyp   [M][OH+2(R-1-p)][OW+2(S-1-p)] + T   one image's padded output gradient
// Forward uses wt_f and the first xp slot; backward goes through the batch
// in groups of G images (the whole batch when it fits group_budget).

namespace gradwire::kernels::direct_conv {
namespace {

/// GRADWIRE_DIRECT_CONV=0 turns the direct kernels off (A/B comparisons).
bool enabled_from_env() {
  const char* v = std::getenv("GRADWIRE_DIRECT_CONV");
  return v == nullptr || std::string(v) != "0";
}

std::atomic<bool> g_enabled{enabled_from_env()};

std::atomic<bool> g_width_rule{true};

bool has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/// AVX-512 where the CPU has it, else AVX2 with FMA. The AVX2 kernels were
/// opt-in while they measured slower than im2col + OpenBLAS's AVX-512 GEMM on
/// an AVX-512 machine; with the channel-vectorised kernels they are faster
/// even there (bench/RESULTS.md, "CPU kernels: convolutions").
const isa_kernels* detect() {
  return has_avx512() ? avx512_kernels() : has_avx2() ? avx2_kernels() : nullptr;
}

/// GRADWIRE_DIRECT_CONV=avx2 (or avx512) picks that instruction set when the
/// CPU has it.
const isa_kernels* from_env() {
  const char* v = std::getenv("GRADWIRE_DIRECT_CONV");
  const std::string want = v == nullptr ? "" : v;
  if (want == "avx2" && has_avx2())
    return avx2_kernels();
  if (want == "avx512" && has_avx512())
    return avx512_kernels();
  return detect();
}

std::atomic<const isa_kernels*> g_isa{from_env()};

} // namespace

const isa_kernels* current_isa() { return g_isa.load(); }

namespace {

const isa_kernels* isa() { return g_isa.load(); }

constexpr std::size_t group_budget = 1u << 20; // bytes of xp per group (stays in L2)

struct layout {
  int hp, wp;        // padded input plane
  int hd, wd;        // padded output-gradient plane
  std::size_t tail;
  std::size_t wt_f, wt_b, x_img, dyp;
  int group;         // images per backward group
  std::size_t total; // floats
};

layout make_layout(const conv_geom& g) {
  const auto* k = isa();
  layout l{};
  const int lanes = k->lanes;
  l.hp = g.h + 2 * g.pad;
  l.wp = g.w + 2 * g.pad;
  l.hd = g.out_h() + 2 * (g.r - 1 - g.pad);
  l.wd = g.out_w() + 2 * (g.s - 1 - g.pad);
  l.tail = static_cast<std::size_t>(lanes) * k->max_regs;
  const std::size_t taps = static_cast<std::size_t>(g.c) * g.r * g.s;
  l.wt_f = taps * g.k;
  l.wt_b = taps * g.k;
  l.x_img = static_cast<std::size_t>(g.c) * l.hp * l.wp + l.tail;
  l.dyp = static_cast<std::size_t>(g.k) * l.hd * l.wd + l.tail;
  const std::size_t per_image = l.x_img * sizeof(float);
  l.group = static_cast<int>(std::clamp<std::size_t>(group_budget / per_image, 1, static_cast<std::size_t>(g.n)));
  l.total = l.wt_f + l.wt_b + static_cast<std::size_t>(l.group) * l.x_img + l.dyp;
  return l;
}

} // namespace

/// dst (planes of hp x wp, then a zeroed tail) <- src planes of h x w placed
/// at row `top`, column `left`, zeros around them. Each float written once.
GW_CLONES void pad_planes(const float* src, int planes, int h, int w, float* dst, int hp, int wp, int top,
                int left, std::size_t tail) {
  const int right = wp - left - w, bottom = hp - top - h;
  float* __restrict d = dst;
  for (int p = 0; p < planes; ++p) {
    std::memset(d, 0, sizeof(float) * static_cast<std::size_t>(top) * wp);
    d += static_cast<std::ptrdiff_t>(top) * wp;
    const float* __restrict s = src + static_cast<std::size_t>(p) * h * w;
    for (int y = 0; y < h; ++y, d += wp, s += w) {
      for (int i = 0; i < left; ++i)
        d[i] = 0.f;
      for (int i = 0; i < w; ++i)
        d[left + i] = s[i];
      for (int i = 0; i < right; ++i)
        d[left + w + i] = 0.f;
    }
    std::memset(d, 0, sizeof(float) * static_cast<std::size_t>(bottom) * wp);
    d += static_cast<std::ptrdiff_t>(bottom) * wp;
  }
  std::memset(d, 0, sizeof(float) * tail);
}

void forward_weights(const conv_geom& g, const float* w, float* wt) {
  const int taps = g.c * g.r * g.s;
  for (int m = 0; m < g.k; ++m)
    for (int t = 0; t < taps; ++t)
      wt[static_cast<std::size_t>(t) * g.k + m] = w[static_cast<std::size_t>(m) * taps + t];
}

void input_grad_weights(const conv_geom& g, const float* w, float* wt) {
  for (int m = 0; m < g.k; ++m)
    for (int c = 0; c < g.c; ++c)
      for (int r = 0; r < g.r; ++r)
        for (int s = 0; s < g.s; ++s)
          wt[((static_cast<std::size_t>(m) * g.r + (g.r - 1 - r)) * g.s + (g.s - 1 - s)) * g.c + c] =
            w[((static_cast<std::size_t>(m) * g.c + c) * g.r + r) * g.s + s];
}

bool available() { return isa() != nullptr || has_avx2(); }

const char* isa_name() {
  const auto* k = isa();
  return k == nullptr ? "" : k->lanes == 16 ? "avx512" : "avx2";
}

bool use_isa(const char* name) {
  const std::string n = name;
  if (n == "default")
    g_isa.store(detect());
  else if (n == "avx512" && has_avx512())
    g_isa.store(avx512_kernels());
  else if (n == "avx2" && has_avx2())
    g_isa.store(avx2_kernels());
  else
    return false;
  return true;
}
void set_enabled(bool on) { g_enabled.store(on); }
void set_width_rule(bool on) { g_width_rule.store(on); }
bool enabled() { return g_enabled.load(); }

bool applies(const conv_geom& g) {
  if (!enabled() || isa() == nullptr)
    return false;
  const int widest = isa()->lanes * isa()->max_regs;
  const bool pointwise = g.r == 1 && g.s == 1 && g.pad == 0;
  // Rows that fill at most half a register leave half the FMAs idle: there
  // im2col + GEMM is faster (ResNet-20's 8x8 stage on AVX-512: 52 against 75
  // GFLOP/s forward, bench/RESULTS.md "Convolutions").
  const bool half_empty = g_width_rule.load() && 2 * g.out_w() <= isa()->lanes && 2 * g.w <= isa()->lanes;
  return !pointwise && !half_empty && g.stride == 1 && g.pad <= g.r - 1 && g.pad <= g.s - 1 &&
         g.out_w() <= widest && g.w <= widest && g.out_h() > 0 && g.out_w() > 0;
}

std::size_t workspace_bytes(const conv_geom& g) { return make_layout(g).total * sizeof(float); }

void forward(const conv_geom& g, const float* x, const float* w, float* y, float* ws) {
  const auto l = make_layout(g);
  const auto* k = isa();
  float* wt = ws;
  float* xp = ws + l.wt_f + l.wt_b;
  forward_weights(g, w, wt);
  const std::size_t in_img = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t out_img = static_cast<std::size_t>(g.k) * g.out_h() * g.out_w();
  for (int i = 0; i < g.n; ++i) {
    pad_planes(x + i * in_img, g.c, g.h, g.w, xp, l.hp, l.wp, g.pad, g.pad, l.tail);
    k->valid(xp, g.c, l.hp, l.wp, wt, g.k, g.r, g.s, y + i * out_img, g.out_h(), g.out_w());
  }
}

void backward(const conv_geom& g, const float* x, const float* w, const float* dy, float* dx,
              float* dw, float* ws) {
  const auto l = make_layout(g);
  const auto* k = isa();
  const int oh = g.out_h(), ow = g.out_w();
  float* wt_b = ws + l.wt_f;
  float* xp = wt_b + l.wt_b;
  float* dyp = xp + static_cast<std::size_t>(l.group) * l.x_img;
  // dx = valid correlation of dy (padded by R-1-p, S-1-p) with the flipped weights.
  if (dx != nullptr)
    input_grad_weights(g, w, wt_b);
  const std::size_t in_img = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t out_img = static_cast<std::size_t>(g.k) * oh * ow;
  for (int i0 = 0; i0 < g.n; i0 += l.group) {
    const int images = std::min(l.group, g.n - i0);
    for (int j = 0; j < images; ++j) {
      const float* dyi = dy + (i0 + j) * out_img;
      if (dw != nullptr)
        pad_planes(x + (i0 + j) * in_img, g.c, g.h, g.w, xp + j * l.x_img, l.hp, l.wp, g.pad, g.pad, l.tail);
      if (dx != nullptr) {
        pad_planes(dyi, g.k, oh, ow, dyp, l.hd, l.wd, g.r - 1 - g.pad, g.s - 1 - g.pad, l.tail);
        k->valid(dyp, g.k, l.hd, l.wd, wt_b, g.c, g.r, g.s, dx + (i0 + j) * in_img, g.h, g.w);
      }
    }
    if (dw != nullptr)
      k->wgrad(xp, static_cast<std::ptrdiff_t>(l.x_img), g.c, l.hp, l.wp, dy + i0 * out_img, g.k, oh,
               ow, images, g.r, g.s, dw);
  }
}

} // namespace gradwire::kernels::direct_conv

