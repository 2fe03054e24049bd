#pragma once
/// @file fast_math.hpp
/// exp and erf in plain float arithmetic, each within a few ulp of the
/// correctly rounded value, eight at a time on GCC's generic vectors (v8f),
/// which a GW_CLONES caller compiles to AVX-512, AVX2 or SSE2 (GCC does not
/// vectorise a loop around a scalar form: its selects might trap, it says;
/// libm's are calls, one element each). The one-float forms use the same
/// code on one lane.

#include <cstdint>
#include <cstring>

namespace gradwire::kernels::cpu {

// Passed and returned only inside always_inline functions, so the vector
// ABI (which differs with and without AVX) never applies.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f __attribute__((vector_size(32)));
typedef std::int32_t v8i __attribute__((vector_size(32)));

/// exp(x) on eight floats: Cephes' expf, 2^k times a degree-6 polynomial
/// on [-ln2/2, ln2/2]; 0 below -87 (the float range ends there), so
/// exp(-inf) = 0.
__attribute__((always_inline)) inline v8f fast_exp8(v8f x) {
  const v8f lo = v8f{} - 87.f, hi = v8f{} + 88.f;
  v8f xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const v8f t = xc * 1.44269504088896341f + 0.5f;
  v8i ki = __builtin_convertvector(t, v8i);
  ki += __builtin_convertvector(ki, v8f) > t; // a true comparison is -1: floor(t)
  const v8f k = __builtin_convertvector(ki, v8f);
  const v8f r = xc - k * 0.693359375f + k * 2.12194440e-4f;
  v8f p = v8f{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const v8f y = p * r * r + r + 1.f;
  const v8i bits = (ki + 127) << 23;
  v8f two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  return x < lo ? v8f{} : y * two_k;
}

/// erf(x) on eight floats: Eigen's rational approximation for float (odd
/// degree-13 over even degree-8 polynomials), exact to float rounding
/// beyond |x| = 4.
__attribute__((always_inline)) inline v8f fast_erf8(v8f x) {
  const v8f lo = v8f{} - 4.f, hi = v8f{} + 4.f;
  v8f xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const v8f x2 = xc * xc;
  v8f p = v8f{} - 2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  v8f q = v8f{} - 1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return xc * p / q;
}

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__attribute__((always_inline)) inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

/// One float through the eight-wide forms (loop tails, single values).
__attribute__((always_inline)) inline float fast_exp(float x) { return fast_exp8(v8f{} + x)[0]; }
__attribute__((always_inline)) inline float fast_erf(float x) { return fast_erf8(v8f{} + x)[0]; }
#pragma GCC diagnostic pop

} // namespace gradwire::kernels::cpu
