#include "kernels/host_vector.hpp"

#include "kernels/cpu/clones.hpp"

#include <cstdint>
#include <cstring>

namespace gradwire::kernels {

// Compiled without FMA contraction (kernels/CMakeLists.txt), so every
// clone rounds each operation as the expression is written.

// The buffers a caller keeps apart are restrict here: without the run-time
// overlap check that plain pointers cost, each loop is one vector loop.

GW_CLONES void subtract(std::size_t n, const float* a, const float* b, float* __restrict out) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = a[i] - b[i];
}

GW_CLONES void subtract_from(std::size_t n, const float* __restrict a, float* __restrict x) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = a[i] - x[i];
}

GW_CLONES void pull_toward(std::size_t n, float alpha, const float* __restrict g, float* __restrict x) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = g[i] + alpha * (x[i] - g[i]);
}

GW_CLONES void delay_compensate(std::size_t n, float lambda, const float* g, const float* w, const float* w_read,
                                float* __restrict out) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = g[i] + lambda * g[i] * g[i] * (w[i] - w_read[i]);
}

GW_CLONES void merge_answer(std::size_t n, float alpha, const float* __restrict global, const float* __restrict sent,
                            float* __restrict w, float* __restrict base) {
  for (std::size_t i = 0; i < n; ++i) {
    const float pull = alpha * (global[i] - sent[i]);
    w[i] += pull;
    base[i] = sent[i] + pull;
  }
}

// An unsigned max of the exponent fields has no SSE2 instruction, so the
// baseline build ran that form one element at a time: a compare per
// element and an or vectorise everywhere.
GW_CLONES bool all_finite(std::size_t n, const float* x) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bad |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

} // namespace gradwire::kernels
