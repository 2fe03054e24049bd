#pragma once
/// @file bf16.hpp
/// bfloat16 on the wire: a float rounded to its top 16 bits (nearest, ties
/// to even; NaN stays NaN), two values to a 32-bit word, the first in the
/// low half. models/compress.hpp's bf16 mode and the ring's bf16 chunks
/// (transport.wire_dtype) use the same rounding and packing.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gradwire::kernels {

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Words that hold n bf16 values.
constexpr std::size_t bf16_words(std::size_t n) { return (n + 1) / 2; }

/// x[0, n) rounded and packed into out[0, bf16_words(n)).
inline void pack_bf16(const float* x, std::size_t n, std::uint32_t* out) {
  for (std::size_t i = 0; i + 1 < n; i += 2)
    out[i / 2] = static_cast<std::uint32_t>(to_bf16(x[i])) | static_cast<std::uint32_t>(to_bf16(x[i + 1])) << 16;
  if (n % 2)
    out[n / 2] = to_bf16(x[n - 1]);
}

/// The n values packed in `words`, written to out (Add: added to it).
template <bool Add>
inline void unpack_bf16(const std::uint32_t* words, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = from_bf16(static_cast<std::uint16_t>(words[i / 2] >> (16 * (i % 2))));
    if constexpr (Add)
      out[i] += v;
    else
      out[i] = v;
  }
}

} // namespace gradwire::kernels
