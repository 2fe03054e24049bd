#include "kernels/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace gradwire::kernels {

// argmax holds, for every output element, the flat index of the winning
// input element within its own (n, c) plane.
void cpu_backend::maxpool_forward(const pool_geom& g, const float* x, float* y,
                                  std::int32_t* argmax) {
  const int oh = g.out_h(), ow = g.out_w();
  const std::ptrdiff_t planes = static_cast<std::ptrdiff_t>(g.n) * g.c;
  if (g.size == 2 && g.stride == 2) {
    // The common case (LeNet), without the generic window loops.
    for (std::ptrdiff_t p = 0; p < planes; ++p) {
      const float* in = x + p * g.h * g.w;
      float* out = y + p * oh * ow;
      std::int32_t* arg = argmax + p * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        const float* r0 = in + 2 * oy * g.w;
        const float* r1 = r0 + g.w;
        for (int ox = 0; ox < ow; ++ox) {
          // Branch-free: the winner is data-dependent, so branches would
          // mispredict about half the time. max -> maxss; comparisons are
          // used as 0/1 integers (setcc), never as conditions.
          const float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
          const int top_off = b > a, bot_off = d > c;
          const float top = std::max(a, b), bot = std::max(c, d);
          const int use_bot = bot > top;
          out[oy * ow + ox] = std::max(top, bot);
          arg[oy * ow + ox] = 2 * oy * g.w + 2 * ox + use_bot * (g.w + bot_off) + (1 - use_bot) * top_off;
        }
      }
    }
    return;
  }
  for (std::ptrdiff_t p = 0; p < planes; ++p) {
    const float* in = x + p * g.h * g.w;
    float* out = y + p * oh * ow;
    std::int32_t* arg = argmax + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        int best_i = (oy * g.stride) * g.w + ox * g.stride;
        for (int r = 0; r < g.size; ++r)
          for (int s = 0; s < g.size; ++s) {
            const int idx = (oy * g.stride + r) * g.w + ox * g.stride + s;
            if (in[idx] > best) {
              best = in[idx];
              best_i = idx;
            }
          }
        out[oy * ow + ox] = best;
        arg[oy * ow + ox] = best_i;
      }
  }
}

void cpu_backend::maxpool_backward(const pool_geom& g, const float* dy, const std::int32_t* argmax,
                                   float* dx) {
  const int opix = g.out_h() * g.out_w();
  const std::ptrdiff_t planes = static_cast<std::ptrdiff_t>(g.n) * g.c;
  std::memset(dx, 0, sizeof(float) * static_cast<std::size_t>(planes) * g.h * g.w);
  for (std::ptrdiff_t p = 0; p < planes; ++p) {
    float* d = dx + p * g.h * g.w;
    const float* gy = dy + p * opix;
    const std::int32_t* arg = argmax + p * opix;
    for (int i = 0; i < opix; ++i)
      d[arg[i]] += gy[i];
  }
}

void cpu_backend::avgpool_global_forward(const float* x, float* y, int n, int c, int hw) {
  const float inv = 1.f / static_cast<float>(hw);
  for (std::ptrdiff_t p = 0; p < static_cast<std::ptrdiff_t>(n) * c; ++p) {
    const float* in = x + p * hw;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < hw; ++i)
      s += in[i];
    y[p] = s * inv;
  }
}

void cpu_backend::avgpool_global_backward(const float* dy, float* dx, int n, int c, int hw) {
  const float inv = 1.f / static_cast<float>(hw);
  for (std::ptrdiff_t p = 0; p < static_cast<std::ptrdiff_t>(n) * c; ++p) {
    float* out = dx + p * hw;
    const float v = dy[p] * inv;
    for (int i = 0; i < hw; ++i)
      out[i] = v;
  }
}

} // namespace gradwire::kernels
