#pragma once
/// @file dropout_mask.hpp
/// Which elements dropout keeps: a pure function of a key and the
/// element's index, the same on every backend (the CUDA kernels include
/// this header), so a mask is never stored: forward and backward compute
/// it again, and it does not depend on how a batch is split over threads,
/// micro-batches or devices.
///
/// Element `index` under `key` is kept when the top 32 bits of
/// splitmix64(key + index x golden) are at or above p x 2^32; a kept value
/// is scaled by 1 / (1 - p).
///
/// Attention's probabilities index the element (query i, key j) of head h
/// of sample b as ((b x heads + h) x time + i) x time + j (attention_index),
/// with b counted in the step's whole batch.

#include <cstdint>

#if defined(__CUDACC__)
#define GW_DROPOUT_FN __host__ __device__ inline
#else
#define GW_DROPOUT_FN inline
#endif

namespace gradwire::kernels {

GW_DROPOUT_FN std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The key of one dropout site (a layer's place) under a step's key.
GW_DROPOUT_FN std::uint64_t dropout_site(std::uint64_t key, std::uint64_t site) {
  return splitmix64(key ^ splitmix64(site + 0x5851f42d4c957f2dull));
}

/// Elements whose draw falls below this are dropped.
GW_DROPOUT_FN std::uint32_t dropout_threshold(float p) {
  const double t = static_cast<double>(p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xffffffffu : static_cast<std::uint32_t>(t);
}

GW_DROPOUT_FN bool dropout_keeps(std::uint64_t key, std::uint64_t index, std::uint32_t threshold) {
  return static_cast<std::uint32_t>(splitmix64(key + index * 0x9e3779b97f4a7c15ull) >> 32) >= threshold;
}

/// The mask of one dropout site: which elements it keeps, and the scale of
/// those it keeps. Every backend builds it with make_dropout_mask, so they
/// scale by the same float.
struct dropout_mask {
  std::uint64_t key = 0;
  std::uint32_t threshold = 0;
  float keep_scale = 1.f;
  bool on = false; ///< false: every element is kept, unscaled

  GW_DROPOUT_FN bool keeps(std::uint64_t index) const { return dropout_keeps(key, index, threshold); }
  /// 0 for a dropped element, else keep_scale.
  GW_DROPOUT_FN float scale(std::uint64_t index) const { return keeps(index) ? keep_scale : 0.f; }
};

/// The mask of probability p (0: none) under `key`.
GW_DROPOUT_FN dropout_mask make_dropout_mask(float p, std::uint64_t key) {
  dropout_mask m;
  if (p > 0.f) {
    m.key = key;
    m.threshold = dropout_threshold(p);
    m.keep_scale = 1.f / (1.f - p);
    m.on = true;
  }
  return m;
}

/// The mask index of attention's probability (query i, key j) in the head
/// `head_row` = sample x heads + head, of sequences of `time` positions.
GW_DROPOUT_FN std::uint64_t attention_index(std::uint64_t head_row, int time, int i, int j) {
  const auto t = static_cast<std::uint64_t>(time);
  return (head_row * t + static_cast<std::uint64_t>(i)) * t + static_cast<std::uint64_t>(j);
}

} // namespace gradwire::kernels
