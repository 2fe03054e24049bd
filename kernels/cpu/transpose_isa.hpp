#pragma once
/// @file transpose_isa.hpp
/// A matrix transpose in 8x8 tiles of AVX registers (unpack, shuffle, then
/// swap 128-bit halves), for the channel kernels' layout changes between
/// NCHW and pixel-major. Included by direct_conv_isa.hpp only (AVX code).

namespace gradwire::kernels::direct_conv::GW_ISA {

/// dst[j][i] = src[i][j] for an 8x8 tile; rows ls and ld floats apart.
inline void transpose8x8(const float* src, std::ptrdiff_t ls, float* dst, std::ptrdiff_t ld) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_ps(src + i * ls);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

/// dst[cols][rows] = src[rows][cols]^T, both dense.
inline void transpose(const float* src, int rows, int cols, float* dst) {
  const int r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  for (int i = 0; i < r8; i += 8)
    for (int j = 0; j < c8; j += 8)
      transpose8x8(src + static_cast<std::ptrdiff_t>(i) * cols + j, cols, dst + static_cast<std::ptrdiff_t>(j) * rows + i,
                   rows);
  for (int i = 0; i < rows; ++i)
    for (int j = i < r8 ? c8 : 0; j < cols; ++j)
      dst[static_cast<std::ptrdiff_t>(j) * rows + i] = src[static_cast<std::ptrdiff_t>(i) * cols + j];
}

} // namespace gradwire::kernels::direct_conv::GW_ISA
