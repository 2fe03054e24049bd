// Causal self-attention on the CPU, FlashAttention's way. A head's queries
// and keys are taken in tiles of `tile` rows; each query tile meets the key
// tiles at or before it, scores S = Q K^T come from one small GEMM, and a
// running maximum and sum per row (an online softmax) rescale what was
// accumulated so far. So the time x time score matrix is never stored, only
// one tile x tile block of it. Backward recomputes each block's
// probabilities from q, k and the row's log-sum-exp (FlashAttention-2),
// with D_i = dy_i . y_i, in five GEMMs per block. Dropout of the
// probabilities (kernels/dropout_mask.hpp) draws each block's mask again
// where it is needed: forward scales P before P V and leaves the row sums
// whole, backward uses the masked P for dv and masks dP.
#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/dropout_mask.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gradwire::kernels {

namespace {

using cpu::fast_exp;

constexpr int tile = 64;
constexpr float neg_inf = -std::numeric_limits<float>::infinity();

/// Lanes c0 .. c0 + 7 of a row, as a mask of those below `valid`.
__attribute__((always_inline)) inline cpu::v8i lanes_below(int c0, int valid) {
  const cpu::v8i lane = cpu::v8i{0, 1, 2, 3, 4, 5, 6, 7} + c0;
  return lane < valid;
}

/// p[c] = exp(s[c] - m) for c < valid, 0 after (to cols); returns their
/// sum. A row's last partial group of 8 is computed whole and its lanes at
/// or past `valid` set to 0, whatever s holds there: a score row is `tile`
/// floats, so the group stays inside it.
GW_CLONES float exp_row(const float* s, float* p, int valid, int cols, float m) {
  int c = 0;
  cpu::v8f acc{};
  for (; c + 8 <= valid; c += 8) {
    const cpu::v8f e = cpu::fast_exp8(cpu::load8(s + c) - m);
    cpu::store8(p + c, e);
    acc += e;
  }
  if (c < valid) {
    const cpu::v8f e = lanes_below(c, valid) ? cpu::fast_exp8(cpu::load8(s + c) - m) : cpu::v8f{};
    cpu::store8(p + c, e);
    acc += e;
    c += 8;
  }
  float sum = 0.f;
  for (int j = 0; j < 8; ++j)
    sum += acc[j];
  for (c = std::max(valid, 0); c < cols; ++c)
    p[c] = 0.f;
  return sum;
}

/// max(m, s[c] for c < valid), eight at a time as exp_row reads them.
GW_CLONES float row_max(const float* s, int valid, float m) {
  cpu::v8f top = cpu::v8f{} + m;
  int c = 0;
  for (; c + 8 <= valid; c += 8) {
    const cpu::v8f v = cpu::load8(s + c);
    top = v > top ? v : top;
  }
  if (c < valid) {
    const cpu::v8f v = lanes_below(c, valid) ? cpu::load8(s + c) : cpu::v8f{} + neg_inf;
    top = v > top ? v : top;
  }
  for (int j = 0; j < 8; ++j)
    m = std::max(m, top[j]);
  return m;
}

/// One head's geometry: row strides and where its q, k, v columns start;
/// and its dropout mask (head_row: the sample in the step's batch x heads
/// + the head).
struct head_view {
  int d, hd, h;
  int time = 0;
  dropout_mask drop{};
  std::uint64_t head_row = 0;
  /// p[c] (keys j0 + c, c < valid, of query i) times its mask's scale.
  void drop_row(float* p, int i, int j0, int valid) const {
    for (int c = 0; c < valid; ++c)
      p[c] *= drop.scale(attention_index(head_row, time, i, j0 + c));
  }
  std::ptrdiff_t qkv(std::ptrdiff_t row, int part) const {
    return row * 3 * d + static_cast<std::ptrdiff_t>(part) * d + static_cast<std::ptrdiff_t>(h) * hd;
  }
  std::ptrdiff_t y(std::ptrdiff_t row) const { return row * d + static_cast<std::ptrdiff_t>(h) * hd; }
};

struct forward_tiles {
  std::vector<float> s, p, o, m, l;
  explicit forward_tiles(int hd)
    : s(tile * tile), p(tile * tile), o(static_cast<std::size_t>(tile) * hd), m(tile), l(tile) {}
};

/// Query rows [i0, i1) of one head of the sequence starting at row0.
void forward_query_tile(cpu_backend& be, const float* qkv, float* y, float* lse, std::ptrdiff_t row0, int i0,
                        int i1, const head_view& hv, forward_tiles& w) {
  const int rows = i1 - i0, hd = hv.hd, ld = 3 * hv.d;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  std::fill(w.o.begin(), w.o.end(), 0.f);
  std::fill(w.m.begin(), w.m.end(), neg_inf);
  std::fill(w.l.begin(), w.l.end(), 0.f);
  for (int j0 = 0; j0 < i1; j0 += tile) {
    const int cols = std::min(tile, i1 - j0);
    be.gemm(false, true, rows, cols, hd, scale, qkv + hv.qkv(row0 + i0, 0), ld, qkv + hv.qkv(row0 + j0, 1), ld,
            0.f, w.s.data(), tile);
    for (int r = 0; r < rows; ++r) {
      const int valid = std::min(cols, i0 + r - j0 + 1); // keys j <= i only
      const float* s = w.s.data() + r * tile;
      const float mt = row_max(s, valid, w.m[r]);
      const float corr = w.m[r] == neg_inf ? 0.f : fast_exp(w.m[r] - mt);
      w.l[r] = w.l[r] * corr + exp_row(s, w.p.data() + r * tile, valid, cols, mt);
      w.m[r] = mt;
      if (hv.drop.on)
        hv.drop_row(w.p.data() + r * tile, i0 + r, j0, valid);
      for (int c = 0; c < hd; ++c)
        w.o[static_cast<std::size_t>(r) * hd + c] *= corr;
    }
    be.gemm(false, false, rows, hd, cols, 1.f, w.p.data(), tile, qkv + hv.qkv(row0 + j0, 2), ld, 1.f, w.o.data(),
            hd);
  }
  for (int r = 0; r < rows; ++r) {
    float* out = y + hv.y(row0 + i0 + r);
    const float inv = 1.f / w.l[r];
    for (int c = 0; c < hd; ++c)
      out[c] = w.o[static_cast<std::size_t>(r) * hd + c] * inv;
    lse[i0 + r] = w.m[r] + std::log(w.l[r]);
  }
}

struct backward_tiles {
  std::vector<float> s, p, dp, di, pz, z; // pz, z: the masked P and the mask's scales, with dropout
  explicit backward_tiles(int time)
    : s(tile * tile), p(tile * tile), dp(tile * tile), di(time), pz(tile * tile), z(tile * tile) {}
};

/// With dropout, w.z holds the block's scales and w.pz the masked P.
void mask_block(const head_view& hv, int i0, int rows, int j0, int cols, backward_tiles& w) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int at = r * tile + c;
      w.z[at] = hv.drop.scale(attention_index(hv.head_row, hv.time, i0 + r, j0 + c));
      w.pz[at] = w.p[at] * w.z[at];
    }
}

/// The five GEMMs of query tile [i0, i1) against key tile [j0, j0 + cols).
void backward_block(cpu_backend& be, const float* qkv, const float* dy, const float* lse, float* dqkv,
                    std::ptrdiff_t row0, int i0, int i1, int j0, int cols, const head_view& hv, backward_tiles& w) {
  const int rows = i1 - i0, hd = hv.hd, ld = 3 * hv.d;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const float* q = qkv + hv.qkv(row0 + i0, 0);
  const float* k = qkv + hv.qkv(row0 + j0, 1);
  const float* v = qkv + hv.qkv(row0 + j0, 2);
  const float* g = dy + hv.y(row0 + i0);
  be.gemm(false, true, rows, cols, hd, scale, q, ld, k, ld, 0.f, w.s.data(), tile);
  for (int r = 0; r < rows; ++r)
    exp_row(w.s.data() + r * tile, w.p.data() + r * tile, std::min(cols, i0 + r - j0 + 1), cols, lse[i0 + r]);
  if (hv.drop.on)
    mask_block(hv, i0, rows, j0, cols, w);
  be.gemm(true, false, cols, hd, rows, 1.f, (hv.drop.on ? w.pz : w.p).data(), tile, g, hv.d, 1.f,
          dqkv + hv.qkv(row0 + j0, 2), ld);
  be.gemm(false, true, rows, cols, hd, 1.f, g, hv.d, v, ld, 0.f, w.dp.data(), tile);
  for (int r = 0; r < rows; ++r) {
    float* ds = w.dp.data() + r * tile;
    const float* p = w.p.data() + r * tile;
    const float di = w.di[static_cast<std::size_t>(i0 + r)];
    if (hv.drop.on) {
      const float* z = w.z.data() + r * tile;
      for (int c = 0; c < cols; ++c)
        ds[c] = p[c] * (ds[c] * z[c] - di) * scale;
      continue;
    }
    for (int c = 0; c < cols; ++c)
      ds[c] = p[c] * (ds[c] - di) * scale;
  }
  be.gemm(false, false, rows, hd, cols, 1.f, w.dp.data(), tile, k, ld, 1.f, dqkv + hv.qkv(row0 + i0, 0), ld);
  be.gemm(true, false, cols, hd, rows, 1.f, w.dp.data(), tile, q, ld, 1.f, dqkv + hv.qkv(row0 + j0, 1), ld);
}

void backward_head(cpu_backend& be, const float* qkv, const float* y, const float* dy, const float* lse,
                   float* dqkv, std::ptrdiff_t row0, int time, const head_view& hv, backward_tiles& w) {
  for (int i = 0; i < time; ++i) {
    const float* g = dy + hv.y(row0 + i);
    const float* o = y + hv.y(row0 + i);
    float s = 0.f;
    for (int c = 0; c < hv.hd; ++c)
      s += g[c] * o[c];
    w.di[static_cast<std::size_t>(i)] = s;
    for (int part = 0; part < 3; ++part)
      std::fill_n(dqkv + hv.qkv(row0 + i, part), hv.hd, 0.f);
  }
  for (int i0 = 0; i0 < time; i0 += tile) {
    const int i1 = std::min(time, i0 + tile);
    for (int j0 = 0; j0 < i1; j0 += tile)
      backward_block(be, qkv, dy, lse, dqkv, row0, i0, i1, j0, std::min(tile, i1 - j0), hv, w);
  }
}

/// Head h of sample b (in this call) of a call of `heads` heads.
head_view view_of(int d, int heads, int time, int b, int h, const attention_dropout& drop) {
  const auto sample = static_cast<std::uint64_t>(drop.first_sample + b);
  return {d, d / heads, h, time, make_dropout_mask(drop.p, drop.key),
          sample * static_cast<std::uint64_t>(heads) + static_cast<std::uint64_t>(h)};
}

} // namespace

void cpu_backend::attention_forward(const float* qkv, float* y, float* lse, int batch, int time, int heads, int d,
                                    const attention_dropout& drop) {
  check_dropout(drop.p, "attention");
  forward_tiles w(d / heads);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i0 = 0; i0 < time; i0 += tile)
        forward_query_tile(*this, qkv, y, lse + (static_cast<std::ptrdiff_t>(b) * heads + h) * time,
                           static_cast<std::ptrdiff_t>(b) * time, i0, std::min(time, i0 + tile),
                           view_of(d, heads, time, b, h, drop), w);
}

void cpu_backend::attention_backward(const float* qkv, const float* y, const float* dy, const float* lse,
                                     float* dqkv, int batch, int time, int heads, int d,
                                     const attention_dropout& drop) {
  check_dropout(drop.p, "attention");
  backward_tiles w(time);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      backward_head(*this, qkv, y, dy, lse + (static_cast<std::ptrdiff_t>(b) * heads + h) * time, dqkv,
                    static_cast<std::ptrdiff_t>(b) * time, time, view_of(d, heads, time, b, h, drop), w);
}

} // namespace gradwire::kernels
