#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/fused_optim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace gradwire::kernels {

namespace {

// The SGD step over distinct buffers, compiled for AVX-512 and AVX2 too
// (the Nesterov choice is loop-invariant: the loop still vectorises).
// Elementwise, no FMA contraction: every version rounds as the scalar loop
// does, bit for bit.
GW_CLONES void sgd_plain(std::size_t n, float lr, float wd, float* __restrict w, const float* __restrict g) {
  for (std::size_t i = 0; i < n; ++i)
    w[i] -= lr * (g[i] + wd * w[i]);
}

GW_CLONES void sgd_momentum(std::size_t n, float lr, float mu, float wd, bool nesterov, float* __restrict w,
                            const float* __restrict g, float* __restrict v) {
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * w[i];
    const float vi = mu * v[i] + gi;
    v[i] = vi;
    w[i] -= lr * (nesterov ? gi + mu * vi : vi);
  }
}

} // namespace

void cpu_backend::sgd_update(std::size_t n, float lr, float momentum, float weight_decay,
                             bool nesterov, float* w, const float* g, float* v) {
  if (momentum == 0.f)
    return sgd_plain(n, lr, weight_decay, w, g);
  sgd_momentum(n, lr, momentum, weight_decay, nesterov, w, g, v);
}

void cpu_backend::adam_update(std::size_t n, float lr, float beta1, float beta2, float eps,
                              float weight_decay, std::int64_t step, float* w, const float* g,
                              float* m, float* v) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i] + weight_decay * w[i];
    m[i] = beta1 * m[i] + (1.f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.f - beta2) * gi * gi;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

} // namespace gradwire::kernels

namespace gradwire::kernels::cpu {

namespace {

// One loop per case so that each vectorises without branches; the gradient
// expression matches cpu_backend::add's ((g0 + g1) * s) so that results are
// bitwise those of add + sgd_update.
template <bool Two, bool Out>
void sgd_sum_loop(std::size_t n, float lr, float momentum, float wd, bool nesterov, float* w,
                  const float* g0, const float* g1, float s, float* v, float* w_out) {
  for (std::size_t i = 0; i < n; ++i) {
    const float g = Two ? (g0[i] + g1[i]) * s : g0[i] * s;
    const float gi = g + wd * w[i];
    float wi;
    if (v == nullptr) {
      wi = w[i] - lr * gi;
    } else {
      const float vi = momentum * v[i] + gi;
      v[i] = vi;
      wi = w[i] - lr * (nesterov ? gi + momentum * vi : vi);
    }
    w[i] = wi;
    if (Out)
      w_out[i] = wi;
  }
}

#if defined(__SSE2__)
/// sgd_sum_loop<Two, false> with the weights written by non-temporal stores
/// (4 floats at a time, the same operations in the same order, so the same
/// bits). The chunk's weights are read next by the other workers, which
/// hold the old lines in their caches: a plain store must take each line
/// back from them one at a time before writing it, several times slower
/// than a write nobody else had read (bench/RESULTS.md, "Figures behind the code"); a
/// streaming store invalidates their copies without waiting, and the
/// readers then take the lines from memory.
template <bool Two>
void sgd_sum_stream(std::size_t n, float lr, float momentum, float wd, bool nesterov, float* w,
                    const float* g0, const float* g1, float s, float* v) {
  const auto addr = reinterpret_cast<std::uintptr_t>(w);
  if (addr % sizeof(float) != 0) { // not even float-aligned: no 16-byte boundary to stream from
    sgd_sum_loop<Two, false>(n, lr, momentum, wd, nesterov, w, g0, g1, s, v, nullptr);
    return;
  }
  const std::size_t head = std::min(n, (16 - addr % 16) % 16 / sizeof(float)); // floats before the boundary
  sgd_sum_loop<Two, false>(head, lr, momentum, wd, nesterov, w, g0, g1, s, v, nullptr);
  const std::size_t end = head + (n - head) / 4 * 4;
  const __m128 vs = _mm_set1_ps(s), vwd = _mm_set1_ps(wd), vlr = _mm_set1_ps(lr), vm = _mm_set1_ps(momentum);
  for (std::size_t i = head; i < end; i += 4) {
    const __m128 wi = _mm_load_ps(w + i);
    const __m128 g = Two ? _mm_mul_ps(_mm_add_ps(_mm_loadu_ps(g0 + i), _mm_loadu_ps(g1 + i)), vs)
                         : _mm_mul_ps(_mm_loadu_ps(g0 + i), vs);
    const __m128 gi = _mm_add_ps(g, _mm_mul_ps(vwd, wi));
    __m128 step = gi;
    if (v != nullptr) {
      const __m128 vi = _mm_add_ps(_mm_mul_ps(vm, _mm_loadu_ps(v + i)), gi);
      _mm_storeu_ps(v + i, vi);
      step = nesterov ? _mm_add_ps(gi, _mm_mul_ps(vm, vi)) : vi;
    }
    _mm_stream_ps(w + i, _mm_sub_ps(wi, _mm_mul_ps(vlr, step)));
  }
  _mm_sfence(); // the streamed weights are visible before whatever publishes them
  sgd_sum_loop<Two, false>(n - end, lr, momentum, wd, nesterov, w + end, g0 + end, g1 == nullptr ? nullptr : g1 + end,
                           s, v == nullptr ? nullptr : v + end, nullptr);
}
#endif

} // namespace

void sgd_update_sum(std::size_t n, float lr, float momentum, float weight_decay, bool nesterov,
                    float* w, const float* g0, const float* g1, float s, float* v, float* w_out) {
  if (momentum == 0.f)
    v = nullptr;
#if defined(__SSE2__)
  if (w_out == nullptr && n >= stream_min_floats) {
    g1 != nullptr ? sgd_sum_stream<true>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v)
                  : sgd_sum_stream<false>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v);
    return;
  }
#endif
  if (g1 != nullptr)
    w_out != nullptr ? sgd_sum_loop<true, true>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out)
                     : sgd_sum_loop<true, false>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out);
  else
    w_out != nullptr ? sgd_sum_loop<false, true>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out)
                     : sgd_sum_loop<false, false>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out);
}

} // namespace gradwire::kernels::cpu
