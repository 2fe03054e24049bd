#pragma once
/// @file fast_math.hpp
/// exp and erf in plain float arithmetic, so that a loop over them
/// vectorises (libm's are calls, one element at a time), each within a
/// few ulp of the correctly rounded value.

#include <cstdint>
#include <cstring>

namespace gradwire::kernels::cpu {

/// exp(x): Cephes' expf, 2^k times a degree-6 polynomial on [-ln2/2, ln2/2];
/// 0 below -87 (the float range ends there), so exp(-inf) = 0.
inline float fast_exp(float x) {
  // Ternaries, not std::min/max: those take references, which keep GCC
  // from vectorising a loop around this.
  float xc = x < -87.f ? -87.f : x;
  xc = xc > 88.f ? 88.f : xc;
  const float t = xc * 1.44269504088896341f + 0.5f;
  const float tt = static_cast<float>(static_cast<std::int32_t>(t));
  const float k = tt > t ? tt - 1.f : tt; // floor(t)
  const float r = xc - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.f;
  const std::int32_t bits = (static_cast<std::int32_t>(k) + 127) << 23;
  float two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  return x < -87.f ? 0.f : y * two_k;
}

/// erf(x): Eigen's rational approximation for float (odd degree-13 over
/// even degree-8 polynomials), exact to float rounding beyond |x| = 4.
inline float fast_erf(float x) {
  float xc = x < -4.f ? -4.f : x;
  xc = xc > 4.f ? 4.f : xc;
  const float x2 = xc * xc;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return xc * p / q;
}

} // namespace gradwire::kernels::cpu
