#include "models/compress.hpp"

#include "kernels/bf16.hpp"
#include "models/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <unordered_set>

namespace gradwire::models {

namespace {

constexpr const char* mode_names[] = {"none", "bf16", "topk", "randk", "sign", "powersgd", "int8"};

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

using kernels::from_bf16;
using kernels::to_bf16;

bool sparse(compress_mode m) { return m == compress_mode::topk || m == compress_mode::randk; }

double sum_of_squares(const float* v, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s += static_cast<double>(v[i]) * v[i];
  return s;
}

} // namespace

std::optional<compress_mode> compress_mode_of(std::string_view name) {
  for (std::size_t i = 0; i < std::size(mode_names); ++i)
    if (name == mode_names[i])
      return static_cast<compress_mode>(i);
  return std::nullopt;
}

const char* compress_name(compress_mode m) { return mode_names[static_cast<std::size_t>(m)]; }

std::size_t kept_count(double ratio, std::size_t n) {
  const auto k = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<std::size_t>(k, n == 0 ? 0 : 1, n);
}

std::size_t payload_words(const compress_spec& s, std::size_t n) {
  switch (s.mode) {
  case compress_mode::bf16: return (n + 1) / 2;
  case compress_mode::topk:
  case compress_mode::randk: return 1 + 2 * kept_count(s.ratio, n);
  case compress_mode::sign: return 1 + (n + 31) / 32;
  case compress_mode::int8: return (n + int8_block - 1) / int8_block + (n + 3) / 4;
  default: return n;
  }
}

compressor::compressor(compress_spec spec, std::size_t n)
    : spec_(spec), n_(n), residual_(n, 0.f), c_(spec.error_feedback ? 0 : n) {
  gradwire::check(spec.mode != compress_mode::none && spec.mode != compress_mode::powersgd,
            std::string("compressor: mode ") + compress_name(spec.mode) + " is not a one-round mode");
  gradwire::check(!sparse(spec.mode) || (spec.ratio > 0 && spec.ratio <= 1), "compressor: ratio must be in (0, 1]");
}

std::vector<std::uint32_t> compressor::encode(const float* g, std::int64_t step, int rank) {
  // With error feedback c is built in the residual's buffer, and what is
  // sent is then taken off it: e' = c - D(C(c)), exactly 0 where top-k or
  // random-k sent the value.
  float* c = spec_.error_feedback ? residual_.data() : c_.data();
  const float* e = residual_.data();
  for (std::size_t i = 0; i < n_; ++i)
    c[i] = g[i] + e[i];
  const double total = sum_of_squares(c, n_);
  auto out = spec_.mode == compress_mode::bf16 ? encode_bf16(c)
             : sparse(spec_.mode)             ? encode_sparse(c, step, rank)
             : spec_.mode == compress_mode::int8 ? encode_int8(c)
                                              : encode_sign(c);
  float* left = residual_.data();
  if (!spec_.error_feedback) {
    dropped_.assign(c, c + n_);
    left = dropped_.data();
  }
  accumulate(out.data(), out.size(), -1.f, left);
  energy_ = {sum_of_squares(left, n_), total};
  return out;
}

std::vector<std::uint32_t> compressor::encode_bf16(const float* c) const {
  std::vector<std::uint32_t> out((n_ + 1) / 2, 0u);
  for (std::size_t i = 0; i < n_; ++i)
    out[i / 2] |= static_cast<std::uint32_t>(to_bf16(c[i])) << (16 * (i % 2));
  return out;
}

std::vector<std::uint32_t> compressor::encode_sparse(const float* c, std::int64_t step, int rank) const {
  const std::size_t k = kept_count(spec_.ratio, n_);
  std::vector<std::uint32_t> idx;
  if (spec_.mode == compress_mode::topk) {
    idx.resize(n_);
    std::iota(idx.begin(), idx.end(), 0u);
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                     [c](std::uint32_t a, std::uint32_t b) {
                       const float fa = std::fabs(c[a]), fb = std::fabs(c[b]);
                       return fa > fb || (fa == fb && a < b);
                     });
    idx.resize(k);
  } else { // Floyd's sampling: k distinct indices, the same for a (seed, step, rank) everywhere
    std::mt19937_64 rng(spec_.seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(step) * 1000003ull +
                        static_cast<std::uint64_t>(rank));
    std::unordered_set<std::uint32_t> chosen;
    for (std::size_t j = n_ - k; j < n_; ++j) {
      const auto t = static_cast<std::uint32_t>(std::uniform_int_distribution<std::size_t>(0, j)(rng));
      if (!chosen.insert(t).second)
        chosen.insert(static_cast<std::uint32_t>(j));
    }
    idx.assign(chosen.begin(), chosen.end());
  }
  std::sort(idx.begin(), idx.end());
  std::vector<std::uint32_t> out(1 + 2 * k);
  out[0] = static_cast<std::uint32_t>(k);
  for (std::size_t j = 0; j < k; ++j) {
    out[1 + j] = idx[j];
    out[1 + k + j] = bits_of(c[idx[j]]);
  }
  return out;
}

std::vector<std::uint32_t> compressor::encode_sign(const float* c) const {
  double l1 = 0;
  for (std::size_t i = 0; i < n_; ++i)
    l1 += std::fabs(c[i]);
  std::vector<std::uint32_t> out(1 + (n_ + 31) / 32, 0u);
  out[0] = bits_of(n_ == 0 ? 0.f : static_cast<float>(l1 / static_cast<double>(n_)));
  for (std::size_t i = 0; i < n_; ++i)
    if (std::signbit(c[i]))
      out[1 + i / 32] |= 1u << (i % 32);
  return out;
}

std::vector<std::uint32_t> compressor::encode_int8(const float* c) const {
  const std::size_t blocks = (n_ + int8_block - 1) / int8_block;
  std::vector<std::uint32_t> out(payload_words(spec_, n_), 0u);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * int8_block, end = std::min(n_, begin + int8_block);
    float m = 0.f;
    for (std::size_t i = begin; i < end; ++i)
      m = std::max(m, std::fabs(c[i]));
    const float scale = std::isfinite(m) ? m / 127.f : 0.f; // a non-finite block is sent as zeros
    out[b] = bits_of(scale);
    for (std::size_t i = begin; i < end && scale > 0.f; ++i) {
      const float r = std::nearbyint(c[i] / scale);
      const float q = std::isnan(r) ? 0.f : std::clamp(r, -127.f, 127.f); // a NaN value is sent as 0
      const auto byte = static_cast<std::uint32_t>(static_cast<std::uint8_t>(static_cast<std::int8_t>(q)));
      out[blocks + i / 4] |= byte << (8 * (i % 4));
    }
  }
  return out;
}

void compressor::check(const std::uint32_t* words, std::size_t count) const {
  const auto fail = [&](const std::string& what) {
    throw error(std::string("a ") + compress_name(spec_.mode) + " payload of " + std::to_string(count) +
                " words for " + std::to_string(n_) + " values: " + what);
  };
  if (count != payload_words(spec_, n_))
    fail("expected " + std::to_string(payload_words(spec_, n_)) + " words");
  if (spec_.mode == compress_mode::int8)
    for (std::size_t b = 0; b < (n_ + int8_block - 1) / int8_block; ++b) {
      const float scale = float_of(words[b]);
      if (!std::isfinite(scale) || scale < 0.f)
        fail("block " + std::to_string(b) + " has the scale " + std::to_string(scale));
    }
  if (!sparse(spec_.mode))
    return;
  const std::size_t k = words[0];
  if (k != kept_count(spec_.ratio, n_))
    fail("it says " + std::to_string(k) + " values");
  for (std::size_t j = 0; j < k; ++j)
    if (words[1 + j] >= n_ || (j > 0 && words[1 + j] <= words[j]))
      fail("index " + std::to_string(words[1 + j]) + " at " + std::to_string(j) +
           " is out of range or not ascending");
}

void compressor::accumulate(const std::uint32_t* words, std::size_t count, float scale, float* out) const {
  check(words, count);
  switch (spec_.mode) {
  case compress_mode::bf16:
    for (std::size_t i = 0; i < n_; ++i)
      out[i] += scale * from_bf16(static_cast<std::uint16_t>(words[i / 2] >> (16 * (i % 2))));
    break;
  case compress_mode::sign: {
    const float s = float_of(words[0]) * scale;
    for (std::size_t i = 0; i < n_; ++i)
      out[i] += (words[1 + i / 32] >> (i % 32)) & 1u ? -s : s;
    break;
  }
  case compress_mode::int8: {
    const std::size_t blocks = (n_ + int8_block - 1) / int8_block;
    for (std::size_t i = 0; i < n_; ++i) {
      const auto q = static_cast<std::int8_t>(static_cast<std::uint8_t>(words[blocks + i / 4] >> (8 * (i % 4))));
      out[i] += scale * (float_of(words[i / int8_block]) * static_cast<float>(q));
    }
    break;
  }
  default: {
    const std::size_t k = words[0];
    for (std::size_t j = 0; j < k; ++j)
      out[words[1 + j]] += scale * float_of(words[1 + k + j]);
  }
  }
}

std::vector<matrix_block> matrix_blocks(const param_layout& layout, std::size_t size) {
  std::vector<matrix_block> out;
  std::size_t at = 0;
  const auto pad_to = [&](std::size_t offset) { // alignment padding between tensors: sent whole (zeros)
    if (offset > at)
      out.push_back({at, 1, offset - at});
    at = offset;
  };
  for (std::size_t i = 0; i < layout.specs.size(); ++i) {
    const auto& shape = layout.specs[i].shape;
    std::size_t total = 1;
    for (auto d : shape)
      total *= static_cast<std::size_t>(d);
    const std::size_t rows = shape.size() >= 2 && shape[0] > 0 ? static_cast<std::size_t>(shape[0]) : 1;
    pad_to(layout.offsets[i]);
    out.push_back({at, rows, total / rows});
    at += total;
  }
  pad_to(size);
  return out;
}

} // namespace gradwire::models
