/// @file conv_libs.cpp
/// The convolutions gradwire's models run (LeNet-5 and ResNet-20 at batch 64),
/// timed on one thread in each implementation this machine has, side by side
/// in one process, every pass (forward, input gradient, weight gradient):
///   - direct rows: gradwire's row-vectorised direct kernels (kernels/cpu/direct_conv*,
///               the channel-vectorised ones off), on the instruction set
///               GRADWIRE_DIRECT_CONV picks;
///   - im2col:   gradwire's im2col + GEMM path (direct kernels off);
///   - gradwire: what conv.cpp chooses by default, per pass (oneDNN's blocked
///               primitives with their reorders, onednn_conv.cpp, for the
///               layers of 16 channels and more);
///   - oneDNN:   oneDNN 2.6 convolution primitives on the same NCHW tensors
///               (its own choice of kernel for plain layouts), when built
///               against libdnnl (GRADWIRE_HAVE_DNNL);
///   - oneDNN blocked: the primitives on the layouts they prefer
///               (format_tag::any), reorders from and to NCHW *not* counted:
///               what a runtime that kept every activation in oneDNN's
///               blocked layout would pay. The reorders are a column of
///               their own.
/// Every implementation's result is checked against im2col's first.
///
///   build/gradwire-bench-conv [--reps N] [--only NAME]
///
/// GFLOP/s per pass: 2 * N * K * C * R * S * OH * OW FLOPs each.

#include "kernels/backend.hpp"
#include "kernels/cpu/direct_conv.hpp"
#include "kernels/cpu/onednn_conv.hpp"

#ifdef GRADWIRE_HAVE_DNNL
#include <dnnl.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using gradwire::kernels::conv_geom;

struct layer {
  const char* name;
  conv_geom g;
};

std::vector<layer> layers() {
  auto mk = [](int c, int hw, int k, int r, int stride, int pad) {
    conv_geom g;
    g.n = 64, g.c = c, g.h = hw, g.w = hw, g.k = k, g.r = r, g.s = r, g.stride = stride, g.pad = pad;
    return g;
  };
  return {
    {"lenet conv1 1>6 5x5 28", mk(1, 28, 6, 5, 1, 2)},
    {"lenet conv2 6>16 5x5 14", mk(6, 14, 16, 5, 1, 0)},
    {"resnet stem 3>16 3x3 32", mk(3, 32, 16, 3, 1, 1)},
    {"resnet s1 16>16 3x3 32", mk(16, 32, 16, 3, 1, 1)},
    {"resnet s2a 16>32 3x3/2 32", mk(16, 32, 32, 3, 2, 1)},
    {"resnet s2p 16>32 1x1/2 32", mk(16, 32, 32, 1, 2, 0)},
    {"resnet s2 32>32 3x3 16", mk(32, 16, 32, 3, 1, 1)},
    {"resnet s3a 32>64 3x3/2 16", mk(32, 16, 64, 3, 2, 1)},
    {"resnet s3p 32>64 1x1/2 16", mk(32, 16, 64, 1, 2, 0)},
    {"resnet s3 64>64 3x3 8", mk(64, 8, 64, 3, 1, 1)},
  };
}

/// How many of each layer ResNet-20 / LeNet-5 run per step (for the step total).
int count_in_model(const std::string& name) {
  if (name.find("resnet s1 ") == 0 || name.find("resnet s2 ") == 0 || name.find("resnet s3 ") == 0)
    return name.find("s1 ") != std::string::npos ? 6 : 5;
  return 1;
}

double flops(const conv_geom& g) {
  return 2.0 * g.n * g.k * g.c * g.r * g.s * g.out_h() * g.out_w();
}

/// Best of `rounds` rounds of `reps` calls, seconds per call.
double time_best(const std::function<void()>& f, int reps, int rounds = 5) {
  f();
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
      f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    best = std::min(best, s);
  }
  return best;
}

struct tensors {
  std::vector<float> x, w, y, dy, dx, dw;
};

tensors make(const conv_geom& g) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  tensors t;
  auto fill = [&](std::vector<float>& v, std::size_t n) {
    v.resize(n);
    for (auto& e : v)
      e = u(rng);
  };
  fill(t.x, static_cast<std::size_t>(g.n) * g.c * g.h * g.w);
  fill(t.w, static_cast<std::size_t>(g.k) * g.c * g.r * g.s);
  fill(t.dy, static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w());
  t.y.assign(t.dy.size(), 0.f);
  t.dx.assign(t.x.size(), 0.f);
  t.dw.assign(t.w.size(), 0.f);
  return t;
}

double max_rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - ref[i])));
    den = std::max(den, static_cast<double>(std::fabs(ref[i])));
  }
  return den > 0 ? num / den : num;
}

/// The three passes' seconds; negative: not available.
struct timing {
  double fwd = -1, bwd_data = -1, bwd_w = -1, reorder = -1;
  double total() const { return fwd < 0 ? -1 : fwd + std::max(0.0, bwd_data) + std::max(0.0, bwd_w); }
};

enum class path { rows, im2col, chosen };

/// gradwire's CPU backend on one path: the direct kernels with their
/// row-vectorised weight gradient, im2col + GEMM alone, or what it chooses by
/// default (the channel-vectorised kernels where they apply).
/// Backward runs twice: once with dx (both gradients) and once without
/// (weights only), so that the input gradient's share is the difference.
timing gradwire_time(const conv_geom& g, path p, int reps, const tensors& ref, bool check) {
  namespace dc = gradwire::kernels::direct_conv;
  auto& be = gradwire::kernels::backend_for(gradwire::kernels::device::cpu());
  dc::set_enabled(p != path::im2col);
  dc::set_channel_wgrad(p == path::chosen);
  dc::set_channel_conv(p == path::chosen);
  gradwire::kernels::onednn_conv::set_enabled(p == path::chosen); // oneDNN where the rule sends a layer to it
  if (p == path::rows && !dc::applies(g)) {
    dc::set_enabled(true);
    dc::set_channel_wgrad(true);
    dc::set_channel_conv(true);
    gradwire::kernels::onednn_conv::set_enabled(true);
    return {};
  }
  auto t = make(g);
  std::vector<char> ws(be.conv2d_workspace_bytes(g) + 64);
  void* wsp = ws.data();
  be.conv2d_forward(g, t.x.data(), t.w.data(), t.y.data(), wsp);
  std::fill(t.dw.begin(), t.dw.end(), 0.f);
  be.conv2d_backward(g, t.x.data(), t.w.data(), t.dy.data(), t.dx.data(), t.dw.data(), wsp);
  if (check) {
    const double e = std::max({max_rel_err(t.y, ref.y), max_rel_err(t.dx, ref.dx), max_rel_err(t.dw, ref.dw)});
    if (e > 1e-4) {
      std::fprintf(stderr, "gradwire path %d: relative error %.2g against im2col\n", static_cast<int>(p), e);
      std::exit(1);
    }
  }
  timing tm;
  tm.fwd = time_best([&] { be.conv2d_forward(g, t.x.data(), t.w.data(), t.y.data(), wsp); }, reps);
  const double both = time_best(
    [&] { be.conv2d_backward(g, t.x.data(), t.w.data(), t.dy.data(), t.dx.data(), t.dw.data(), wsp); }, reps);
  tm.bwd_w = time_best(
    [&] { be.conv2d_backward(g, t.x.data(), t.w.data(), t.dy.data(), nullptr, t.dw.data(), wsp); }, reps);
  tm.bwd_data = std::max(0.0, both - tm.bwd_w);
  dc::set_enabled(true);
  dc::set_channel_wgrad(true);
  dc::set_channel_conv(true);
  gradwire::kernels::onednn_conv::set_enabled(true);
  return tm;
}

tensors reference(const conv_geom& g) {
  auto& be = gradwire::kernels::backend_for(gradwire::kernels::device::cpu());
  gradwire::kernels::direct_conv::set_enabled(false);
  gradwire::kernels::direct_conv::set_channel_wgrad(false);
  gradwire::kernels::onednn_conv::set_enabled(false);
  auto t = make(g);
  std::vector<char> ws(be.conv2d_workspace_bytes(g) + 64);
  be.conv2d_forward(g, t.x.data(), t.w.data(), t.y.data(), ws.data());
  be.conv2d_backward(g, t.x.data(), t.w.data(), t.dy.data(), t.dx.data(), t.dw.data(), ws.data());
  gradwire::kernels::direct_conv::set_enabled(true);
  gradwire::kernels::direct_conv::set_channel_wgrad(true);
  gradwire::kernels::onednn_conv::set_enabled(true);
  return t;
}

#ifdef GRADWIRE_HAVE_DNNL
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

/// The six NCHW buffers of one convolution's training step.
struct conv_tensors_view {
  float *x, *w, *y, *dy, *dx, *dw;
};

/// oneDNN forward, backward-data and backward-weights primitives for g; with
/// `blocked`, on the layouts oneDNN prefers, the NCHW reorders timed apart.
struct onednn_conv {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  dnnl::convolution_forward::primitive_desc fpd;
  dnnl::convolution_backward_data::primitive_desc bdpd;
  dnnl::convolution_backward_weights::primitive_desc bwpd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bdata;
  dnnl::convolution_backward_weights bw;
  dnnl::memory x, w, y, dy, dx, wb, x_w, dy_w, dw;
  /// NCHW -> preferred, and back, for every tensor a training step moves.
  std::vector<std::pair<dnnl::memory, dnnl::memory>> in_moves, out_moves;

  onednn_conv(const conv_geom& g, bool blocked) {
    const dnnl::memory::dims src{g.n, g.c, g.h, g.w}, wei{g.k, g.c, g.r, g.s}, dst{g.n, g.k, g.out_h(), g.out_w()},
      strides{g.stride, g.stride}, pad{g.pad, g.pad};
    const tag want = blocked ? tag::any : tag::nchw, want_w = blocked ? tag::any : tag::oihw;
    dnnl::memory::desc src_md(src, dt::f32, want), wei_md(wei, dt::f32, want_w), dst_md(dst, dt::f32, want);
    fpd = {{dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_md, wei_md, dst_md, strides,
            pad, pad},
           eng};
    bdpd = {{dnnl::algorithm::convolution_direct, src_md, wei_md, dst_md, strides, pad, pad}, eng, fpd};
    bwpd = {{dnnl::algorithm::convolution_direct, src_md, wei_md, dst_md, strides, pad, pad}, eng, fpd};
    fwd = dnnl::convolution_forward(fpd);
    bdata = dnnl::convolution_backward_data(bdpd);
    bw = dnnl::convolution_backward_weights(bwpd);
  }

  /// Binds the user's NCHW tensors of `t`, through reorders where oneDNN wants another layout.
  void bind(conv_tensors_view t, const conv_geom& g) {
    const dnnl::memory::dims src{g.n, g.c, g.h, g.w}, wei{g.k, g.c, g.r, g.s}, dst{g.n, g.k, g.out_h(), g.out_w()};
    dnnl::memory u_x({src, dt::f32, tag::nchw}, eng, t.x), u_w({wei, dt::f32, tag::oihw}, eng, t.w),
      u_y({dst, dt::f32, tag::nchw}, eng, t.y), u_dy({dst, dt::f32, tag::nchw}, eng, t.dy),
      u_dx({src, dt::f32, tag::nchw}, eng, t.dx), u_dw({wei, dt::f32, tag::oihw}, eng, t.dw);
    auto as = [&](const dnnl::memory::desc& md, dnnl::memory& user) {
      return md == user.get_desc() ? user : dnnl::memory(md, eng);
    };
    x = as(fpd.src_desc(), u_x), w = as(fpd.weights_desc(), u_w), y = as(fpd.dst_desc(), u_y);
    dy = as(bdpd.diff_dst_desc(), u_dy), dx = as(bdpd.diff_src_desc(), u_dx), wb = as(bdpd.weights_desc(), u_w);
    x_w = as(bwpd.src_desc(), u_x), dy_w = as(bwpd.diff_dst_desc(), u_dy), dw = as(bwpd.diff_weights_desc(), u_dw);
    auto move_in = [&](dnnl::memory& user, dnnl::memory& m) {
      if (user.get(true) != m.get(true))
        in_moves.emplace_back(user, m);
    };
    auto move_out = [&](dnnl::memory& m, dnnl::memory& user) {
      if (user.get(true) != m.get(true))
        out_moves.emplace_back(m, user);
    };
    move_in(u_x, x), move_in(u_w, w), move_in(u_dy, dy), move_in(u_w, wb), move_in(u_x, x_w), move_in(u_dy, dy_w);
    move_out(y, u_y), move_out(dx, u_dx), move_out(dw, u_dw);
  }

  void reorders() {
    for (auto& [a, b] : in_moves)
      dnnl::reorder(a, b).execute(s, a, b);
    for (auto& [a, b] : out_moves)
      dnnl::reorder(a, b).execute(s, a, b);
    s.wait();
  }
  void run_fwd() {
    fwd.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
    s.wait();
  }
  void run_bd() {
    bdata.execute(s, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DIFF_SRC, dx}});
    s.wait();
  }
  void run_bw() {
    bw.execute(s, {{DNNL_ARG_SRC, x_w}, {DNNL_ARG_DIFF_DST, dy_w}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
    s.wait();
  }
};

timing onednn_time(const conv_geom& g, bool blocked, int reps, const tensors& ref) {
  onednn_conv c(g, blocked);
  auto t = make(g);
  c.bind({t.x.data(), t.w.data(), t.y.data(), t.dy.data(), t.dx.data(), t.dw.data()}, g);
  c.reorders();
  c.run_fwd(), c.run_bd(), c.run_bw();
  c.reorders();
  const double e = std::max({max_rel_err(t.y, ref.y), max_rel_err(t.dx, ref.dx), max_rel_err(t.dw, ref.dw)});
  if (e > 1e-4) {
    std::fprintf(stderr, "oneDNN%s: relative error %.2g against im2col\n", blocked ? " blocked" : "", e);
    std::exit(1);
  }
  timing tm;
  tm.fwd = time_best([&] { c.run_fwd(); }, reps);
  tm.bwd_data = time_best([&] { c.run_bd(); }, reps);
  tm.bwd_w = time_best([&] { c.run_bw(); }, reps);
  tm.reorder = c.in_moves.empty() && c.out_moves.empty() ? 0 : time_best([&] { c.reorders(); }, reps);
  return tm;
}
#endif

std::string cell(double seconds, const conv_geom& g) {
  if (seconds < 0)
    return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", flops(g) / seconds / 1e9);
  return b;
}

constexpr int impls = 5;

/// One layer's rows (forward, input and weight gradient, oneDNN's
/// reorders), and its time added to its model's step, by implementation.
template <class Layer>
void time_layer(const Layer& l, int reps, std::vector<std::vector<double>>& step) {
  const char* names[impls] = {"direct rows", "im2col", "gradwire", "oneDNN nchw", "oneDNN blocked"};
  const auto& g = l.g;
  const auto ref = reference(g);
  std::vector<timing> t(impls);
  t[0] = gradwire_time(g, path::rows, reps, ref, true);
  t[1] = gradwire_time(g, path::im2col, reps, ref, true);
  t[2] = gradwire_time(g, path::chosen, reps, ref, true);
#ifdef GRADWIRE_HAVE_DNNL
  t[3] = onednn_time(g, false, reps, ref);
  t[4] = onednn_time(g, true, reps, ref);
#endif
  const bool resnet = std::string(l.name).rfind("resnet", 0) == 0;
  for (int i = 0; i < impls; ++i)
    step[resnet][i] += count_in_model(l.name) * (t[i].total() >= 0 ? t[i] : t[1]).total();
  auto row = [&](const char* pass, double timing::*f) {
    int best = -1;
    for (int i = 0; i < impls; ++i)
      if (t[i].*f >= 0 && (best < 0 || t[i].*f < t[best].*f))
        best = i;
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", l.name, pass, cell(t[0].*f, g).c_str(),
                cell(t[1].*f, g).c_str(), cell(t[2].*f, g).c_str(), cell(t[3].*f, g).c_str(), cell(t[4].*f, g).c_str(),
                names[best]);
  };
  row("forward", &timing::fwd);
  row("input grad", &timing::bwd_data);
  row("weight grad", &timing::bwd_w);
  if (t[4].reorder >= 0)
    std::printf("| %s | NCHW reorders for oneDNN blocked | | | | | %.2f ms | |\n", l.name, t[4].reorder * 1e3);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  int reps = 20;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--only NAME]\n", argv[0]);
      return 2;
    }
  }
  setenv("OMP_NUM_THREADS", "1", 0);
  std::printf("direct kernels: %s\n",
              gradwire::kernels::direct_conv::available() ? gradwire::kernels::direct_conv::isa_name() : "none");
  std::printf("| layer (batch 64) | pass | direct, row wgrad | im2col | gradwire's choice | oneDNN nchw | oneDNN blocked | best |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::vector<std::vector<double>> step(2, std::vector<double>(impls, 0.0)); // [model][impl]
  for (const auto& l : layers())
    if (only.empty() || std::string(l.name).find(only) != std::string::npos)
      time_layer(l, reps, step);
  if (only.empty())
    for (int m = 0; m < 2; ++m)
      std::printf("%s convolutions per step, ms (direct rows, im2col, gradwire's choice, oneDNN nchw, oneDNN "
                  "blocked without reorders; n/a counts as im2col): %.1f %.1f %.1f %.1f %.1f\n",
                  m ? "ResNet-20" : "LeNet-5", step[m][0] * 1e3, step[m][1] * 1e3, step[m][2] * 1e3,
                  step[m][3] * 1e3, step[m][4] * 1e3);
  return 0;
}
