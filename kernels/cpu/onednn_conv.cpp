#include "kernels/cpu/onednn_conv.hpp"

#include "kernels/cpu/direct_conv.hpp"  // current_isa()->transpose
#include "kernels/cpu/onednn_gemm.hpp" // onednn_in_auto
#include "kernels/error.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#ifdef GRADWIRE_HAVE_DNNL
#include <dlfcn.h>
#include <dnnl.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#endif

namespace gradwire::kernels::onednn_conv {
namespace {

enum class choice { automatic, gradwire, onednn };

std::atomic<bool> enabled{true};
/// Activations moved by gradwire's transposes (set_fast_reorders;
/// GRADWIRE_CONV_REORDER=onednn starts with oneDNN's, for A/B runs).
std::atomic<bool> fast{[] {
  const char* v = std::getenv("GRADWIRE_CONV_REORDER");
  return v == nullptr || std::strcmp(v, "onednn") != 0;
}()};
bool fast_reorders() { return fast.load(); }

choice forced() {
  static const choice c = [] {
    const char* v = std::getenv("GRADWIRE_CONV_LIB");
    if (v != nullptr && std::strcmp(v, "onednn") == 0)
      return choice::onednn;
    if (v != nullptr && std::strcmp(v, "gradwire") == 0)
      return choice::gradwire;
    return choice::automatic;
  }();
  return c;
}

/// The measured rule (bench/conv_libs.cpp, bench/RESULTS.md "Convolutions"):
/// oneDNN's blocked primitives beat gradwire's kernels on ResNet-20's layers
/// of 16 channels and more, by 1.5-3x a pass on AVX2 and by less on AVX-512
/// (148 against 188 ms a batch-64 step before reorders, which cost 0.3-1.2 ms
/// a layer); on LeNet-5's (1 and 6 input channels) and ResNet's stem (3)
/// gradwire's own kernels win.
bool rule(const conv_geom& g) { return g.c >= 16 && g.k >= 16; }

} // namespace

void set_enabled(bool on) { enabled = on; }
void set_fast_reorders(bool on) { fast = on; }

#ifndef GRADWIRE_HAVE_DNNL

bool serves(const conv_geom&) { return false; }
int activation_block() { return 0; }
std::size_t workspace_bytes(const conv_geom&) { return 0; }
void forward(const conv_geom&, const float*, const float*, float*, void*) {}
void backward(const conv_geom&, const float*, const float*, const float*, float*, float*, void*) {}
std::string status() { return "built without oneDNN's headers (libdnnl-dev): gradwire's kernels for every convolution"; }

#else

namespace {

using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

/// Sets this thread's OpenMP team to one thread, once. Before any primitive
/// is made on it: oneDNN sizes a primitive's parallel regions when it makes
/// it, and a primitive made while the team was the machine's ran on 2 cores
/// when called from one thread (1.3 cores busy in a "1-thread" run).
void this_thread_alone() {
  thread_local const bool done = [] {
    using fn = void (*)(int);
    if (auto f = reinterpret_cast<fn>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads")))
      f(1);
    return true;
  }();
  (void)done;
}

/// This thread's stream.
dnnl::stream& stream() {
  this_thread_alone();
  thread_local dnnl::stream s(engine());
  return s;
}

constexpr std::size_t align = 64;
std::size_t aligned(std::size_t b) { return (b + align - 1) / align * align; }

/// A tensor in the primitive's layout: where it lives in the workspace
/// (only when that layout is not the user's) and the reorders to or from it.
struct slot {
  md want;
  bool own = false;       ///< a buffer of its own in the workspace
  std::size_t offset = 0; ///< bytes into the workspace
  std::optional<dnnl::reorder> move;
  /// Instead of `move`: an activation between NCHW and nChw8c / nChw16c
  /// (block 8 or 16), moved by gradwire's 8x8 AVX transposes; 0: none.
  /// ONEDNN_VERBOSE timed oneDNN 2.6's own reorder at 1.7-2.4 ms for a
  /// 64x16x32x32 tensor (4 MiB); a ResNet-20 step on one AVX2 thread runs
  /// 5% faster with the transposes (bench/RESULTS.md).
  int block = 0;
  int n = 0, c = 0, hw = 0;
};

/// Whether `want` is `user` (NCHW) with channels in blocks of 8 or 16 that
/// the transposes can move (whole blocks, an instruction set with them):
/// the block, or 0.
int blocked_by_transpose(const md& want, const md& user) {
  const auto d = user.dims();
  if (d.size() != 4 || user != md(d, dt::f32, tag::nchw) || direct_conv::current_isa() == nullptr)
    return 0;
  for (const auto& [b, t] : {std::pair{8, tag::nChw8c}, std::pair{16, tag::nChw16c}})
    if (d[1] % b == 0 && want == md(d, dt::f32, t))
      return b;
  return 0;
}

/// NCHW <-> [n][c/b][h*w][b]: per image and block of b channels, a b x hw
/// matrix transposed.
void move_blocked(const slot& s, const float* from, float* to, bool in) {
  const auto* isa = direct_conv::current_isa();
  const std::size_t per_block = static_cast<std::size_t>(s.block) * s.hw;
  const std::size_t blocks = static_cast<std::size_t>(s.n) * (s.c / s.block);
  for (std::size_t k = 0; k < blocks; ++k) {
    if (in)
      isa->transpose(from + k * per_block, s.block, s.hw, to + k * per_block);
    else
      isa->transpose(from + k * per_block, s.hw, s.block, to + k * per_block);
  }
}

struct plan {
  dnnl::convolution_forward::primitive_desc fpd;
  dnnl::convolution_backward_data::primitive_desc bdpd;
  dnnl::convolution_backward_weights::primitive_desc bwpd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bdata;
  dnnl::convolution_backward_weights bweights;
  md x_u, w_u, y_u;
  slot x, w, y, dy, wd, dx, xw, dyw, dw;
  /// The primitives' scratch (user-managed: oneDNN's own allocated and
  /// freed it on every call, and the kernel zeroed its pages each time;
  /// bench/RESULTS.md, "Figures behind the code"), shared by the three passes, which run one by one.
  std::size_t scratch_offset = 0;
  std::size_t bytes = 0;
};

/// `s` in layout `want`: the user's tensor itself when the layouts match,
/// else a workspace buffer filled (in) or emptied (out) by a reorder.
void place(plan& p, slot& s, const md& want, const md& user, bool in, const slot* same = nullptr) {
  s.want = want;
  if (want == user)
    return;
  s.own = true;
  if (same != nullptr && same->own && same->want == want) { // already there (x kept from forward)
    s.offset = same->offset;
    return;
  }
  s.offset = p.bytes;
  p.bytes += aligned(want.get_size());
  if ((s.block = fast_reorders() ? blocked_by_transpose(want, user) : 0) != 0) {
    const auto d = user.dims();
    s.n = static_cast<int>(d[0]);
    s.c = static_cast<int>(d[1]);
    s.hw = static_cast<int>(d[2] * d[3]);
    return;
  }
  s.move = in ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), want))
              : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), want, engine(), user));
}

/// Moves `user` into slot `s`'s buffer (in) or back out of it; nothing when
/// the primitive reads the user's tensor itself.
void move(const slot& s, dnnl::memory user, dnnl::memory mine, dnnl::stream& st, bool in) {
  if (s.block != 0) {
    const auto* u = static_cast<float*>(user.get_data_handle());
    auto* m = static_cast<float*>(mine.get_data_handle());
    in ? move_blocked(s, u, m, true) : move_blocked(s, m, const_cast<float*>(u), false);
  } else if (s.move) {
    in ? s.move->execute(st, user, mine) : s.move->execute(st, mine, user);
  }
}

/// oneDNN's layout for activations in channel blocks of `block` (0: NCHW).
tag activation_tag(int block) { return block == 16 ? tag::nChw16c : block == 8 ? tag::nChw8c : tag::nchw; }

std::unique_ptr<plan> make_plan(const conv_geom& g) {
  const dnnl::memory::dims src{g.n, g.c, g.h, g.w}, wei{g.k, g.c, g.r, g.s}, dst{g.n, g.k, g.out_h(), g.out_w()},
    strides{g.stride, g.stride}, pad{g.pad, g.pad};
  // Blocked activations: the primitives are made for the caller's layout
  // (no reorders); NCHW ones: for whatever oneDNN prefers, reordered to.
  const tag act = g.block > 0 ? activation_tag(g.block) : tag::any;
  const md any_src(src, dt::f32, act), any_wei(wei, dt::f32, tag::any), any_dst(dst, dt::f32, act);
  auto& e = engine();
  auto p = std::make_unique<plan>();
  dnnl::primitive_attr user_scratch;
  user_scratch.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  p->fpd = dnnl::convolution_forward::primitive_desc(
    dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                    any_src, any_wei, any_dst, strides, pad, pad),
    user_scratch, e);
  p->bdpd = dnnl::convolution_backward_data::primitive_desc(
    dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any_src, any_wei, any_dst, strides,
                                          pad, pad),
    user_scratch, e, p->fpd);
  p->bwpd = dnnl::convolution_backward_weights::primitive_desc(
    dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any_src, any_wei, any_dst,
                                             strides, pad, pad),
    user_scratch, e, p->fpd);
  p->fwd = dnnl::convolution_forward(p->fpd);
  p->bdata = dnnl::convolution_backward_data(p->bdpd);
  p->bweights = dnnl::convolution_backward_weights(p->bwpd);
  p->x_u = md(src, dt::f32, activation_tag(g.block));
  p->w_u = md(wei, dt::f32, tag::oihw);
  p->y_u = md(dst, dt::f32, activation_tag(g.block));
  place(*p, p->x, p->fpd.src_desc(), p->x_u, true);
  place(*p, p->w, p->fpd.weights_desc(), p->w_u, true);
  place(*p, p->y, p->fpd.dst_desc(), p->y_u, false);
  place(*p, p->dy, p->bdpd.diff_dst_desc(), p->y_u, true);
  place(*p, p->wd, p->bdpd.weights_desc(), p->w_u, true, &p->w);
  place(*p, p->dx, p->bdpd.diff_src_desc(), p->x_u, false);
  place(*p, p->xw, p->bwpd.src_desc(), p->x_u, true, &p->x);
  place(*p, p->dyw, p->bwpd.diff_dst_desc(), p->y_u, true, &p->dy);
  // The weight gradient always lands in a buffer of its own, then is added
  // into the caller's (dw += dW) by a reorder with a sum.
  p->dw.want = p->bwpd.diff_weights_desc();
  p->dw.own = true;
  p->dw.offset = p->bytes;
  p->bytes += aligned(p->dw.want.get_size());
  dnnl::post_ops sum;
  sum.append_sum(1.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(sum);
  p->dw.move = dnnl::reorder(dnnl::reorder::primitive_desc(e, p->dw.want, e, p->w_u, attr));
  p->scratch_offset = p->bytes;
  p->bytes += aligned(std::max({p->fpd.scratchpad_desc().get_size(), p->bdpd.scratchpad_desc().get_size(),
                                p->bwpd.scratchpad_desc().get_size()}));
  return p;
}

const plan& plan_for(const conv_geom& g) {
  this_thread_alone();
  static std::mutex mu;
  static std::map<std::array<int, 11>, std::unique_ptr<plan>> plans;
  const std::array<int, 11> key = {g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride, g.pad, fast_reorders() ? 1 : 0, g.block};
  std::lock_guard<std::mutex> lock(mu);
  auto& slot_ = plans[key];
  if (!slot_) {
    try {
      slot_ = make_plan(g);
    } catch (const dnnl::error& e) {
      throw error("oneDNN could not make the convolution " + std::to_string(g.n) + "x" + std::to_string(g.c) + "x" +
                  std::to_string(g.h) + "x" + std::to_string(g.w) + " -> " + std::to_string(g.k) + " channels, " +
                  std::to_string(g.r) + "x" + std::to_string(g.s) + " stride " + std::to_string(g.stride) + ": " +
                  e.what() + " (GRADWIRE_CONV_LIB=gradwire runs gradwire's own kernels)");
    }
  }
  return *slot_;
}

/// The memory `s` names: its workspace buffer, or the user's pointer.
dnnl::memory mem(const slot& s, const md& user, void* ptr, void* workspace) {
  return s.own ? dnnl::memory(s.want, engine(), static_cast<char*>(workspace) + s.offset)
               : dnnl::memory(user, engine(), ptr);
}

void* unconst(const float* p) { return const_cast<float*>(p); }

/// The scratchpad of primitive descriptor `pd`, in the workspace.
template <class PD>
dnnl::memory scratch(const plan& p, const PD& pd, void* workspace) {
  return dnnl::memory(pd.scratchpad_desc(), engine(), static_cast<char*>(workspace) + p.scratch_offset);
}

} // namespace

bool serves(const conv_geom& g) {
  if (!enabled)
    return false;
  if (forced() != choice::automatic)
    return forced() == choice::onednn;
  return onednn_in_auto && rule(g);
}

int activation_block() {
  conv_geom g; // a ResNet layer: 16 channels of 32x32 to 16, 3x3
  g.n = 64;
  g.c = g.k = 16;
  g.h = g.w = 32;
  g.r = g.s = 3;
  g.pad = 1;
  if (!serves(g))
    return 0;
  static const int block = [] {
    try {
      const dnnl::memory::dims src{64, 16, 32, 32}, wei{16, 16, 3, 3};
      const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        md(src, dt::f32, tag::any), md(wei, dt::f32, tag::any),
                                        md(src, dt::f32, tag::any), {1, 1}, {1, 1}, {1, 1}),
        engine());
      for (int b : {8, 16})
        if (pd.src_desc() == md(src, dt::f32, activation_tag(b)) && pd.dst_desc() == pd.src_desc())
          return b;
    } catch (const dnnl::error&) {
    }
    return 0;
  }();
  return block;
}

std::size_t workspace_bytes(const conv_geom& g) { return plan_for(g).bytes; }

void forward(const conv_geom& g, const float* x, const float* w, float* y, void* workspace) {
  const plan& p = plan_for(g);
  auto& s = stream();
  dnnl::memory ux(p.x_u, engine(), unconst(x)), uw(p.w_u, engine(), unconst(w)), uy(p.y_u, engine(), y);
  dnnl::memory mx = mem(p.x, p.x_u, unconst(x), workspace), mw = mem(p.w, p.w_u, unconst(w), workspace),
               my = mem(p.y, p.y_u, y, workspace);
  move(p.x, ux, mx, s, true);
  move(p.w, uw, mw, s, true);
  p.fwd.execute(s, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my},
                    {DNNL_ARG_SCRATCHPAD, scratch(p, p.fpd, workspace)}});
  s.wait(); // (the primitive may run on the stream's own schedule)
  move(p.y, uy, my, s, false);
  s.wait();
}

void backward(const conv_geom& g, const float* x, const float* w, const float* dy, float* dx, float* dw,
              void* workspace) {
  const plan& p = plan_for(g);
  auto& s = stream();
  dnnl::memory ux(p.x_u, engine(), unconst(x)), uw(p.w_u, engine(), unconst(w)),
    udy(p.y_u, engine(), unconst(dy)), udw(p.w_u, engine(), dw);
  dnnl::memory mdy = mem(p.dy, p.y_u, unconst(dy), workspace);
  move(p.dy, udy, mdy, s, true);
  if (dx != nullptr) {
    dnnl::memory udx(p.x_u, engine(), dx);
    dnnl::memory mwd = mem(p.wd, p.w_u, unconst(w), workspace), mdx = mem(p.dx, p.x_u, dx, workspace);
    move(p.wd, uw, mwd, s, true); // (nothing when forward's copy of w is reused as it stands)
    p.bdata.execute(s, {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mwd}, {DNNL_ARG_DIFF_SRC, mdx},
                        {DNNL_ARG_SCRATCHPAD, scratch(p, p.bdpd, workspace)}});
    s.wait();
    move(p.dx, udx, mdx, s, false);
  }
  dnnl::memory mxw = mem(p.xw, p.x_u, unconst(x), workspace), mdyw = mem(p.dyw, p.y_u, unconst(dy), workspace);
  move(p.xw, ux, mxw, s, true); // (nothing for a layout forward left in the workspace)
  move(p.dyw, udy, mdyw, s, true);
  dnnl::memory mdw(p.dw.want, engine(), static_cast<char*>(workspace) + p.dw.offset);
  p.bweights.execute(s, {{DNNL_ARG_SRC, mxw}, {DNNL_ARG_DIFF_DST, mdyw}, {DNNL_ARG_DIFF_WEIGHTS, mdw},
                         {DNNL_ARG_SCRATCHPAD, scratch(p, p.bwpd, workspace)}});
  p.dw.move->execute(s, mdw, udw);
  s.wait();
}

std::string status() {
  const auto v = dnnl::version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
         " convolutions for layers of 16 channels and more" +
         (onednn_in_auto ? "" : " (not in sanitizer builds unless GRADWIRE_CONV_LIB=onednn)");
}

#endif

} // namespace gradwire::kernels::onednn_conv
