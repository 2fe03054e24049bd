#pragma once
/// @file token_windows.hpp
/// Language-model windows over a sequence of token ids, shared by byte
/// text (text.cpp) and token files (tokens.cpp): a sample is `context`
/// ids, its labels the `context` ids after each; each window's first
/// position is kept in `offsets` (data.partition = "contiguous").
#include "models/dataset.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gradwire::models::windows {

inline std::int32_t token_at(const std::string& s, std::size_t i) { return static_cast<unsigned char>(s[i]); }
inline std::int32_t token_at(const std::vector<std::uint16_t>& s, std::size_t i) { return s[i]; }

/// An empty split of `count` windows of `context` ids over `classes` ids.
inline dataset make_split(const std::string& name, int context, std::int64_t count, int classes) {
  dataset d;
  d.name = name;
  d.channels = d.height = 1;
  d.width = context;
  d.classes = classes;
  d.label_width = context;
  d.images.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(context));
  d.labels.resize(d.images.size());
  d.offsets.resize(static_cast<std::size_t>(count));
  return d;
}

/// Window i of `seq` from position `at`.
template <class Seq> void put(dataset& d, std::int64_t i, const Seq& seq, std::size_t at, int context) {
  const auto c = static_cast<std::size_t>(context);
  d.offsets[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(at);
  for (std::size_t j = 0; j < c; ++j) {
    d.images[static_cast<std::size_t>(i) * c + j] = static_cast<float>(token_at(seq, at + j));
    d.labels[static_cast<std::size_t>(i) * c + j] = token_at(seq, at + j + 1);
  }
}

/// Training windows over seq[0, n): as many as n holds end to end, at
/// offsets drawn from `seed` (n >= context + 1).
template <class Seq>
dataset training(const std::string& name, const Seq& seq, std::size_t n, int context, int classes, std::uint64_t seed) {
  const auto count = static_cast<std::int64_t>(n / static_cast<std::size_t>(context));
  auto d = make_split(name, context, count, classes);
  std::mt19937_64 rng(seed ^ 0x7e47da7aULL);
  std::uniform_int_distribution<std::size_t> start(0, n - static_cast<std::size_t>(context) - 1);
  for (std::int64_t i = 0; i < count; ++i)
    put(d, i, seq, start(rng), context);
  return d;
}

/// Validation windows over seq[from, from + n), consecutive (n >= context + 1).
template <class Seq>
dataset validation(const std::string& name, const Seq& seq, std::size_t from, std::size_t n, int context, int classes) {
  const auto c = static_cast<std::size_t>(context);
  const auto count = static_cast<std::int64_t>((n - 1) / c);
  auto d = make_split(name, context, count, classes);
  for (std::int64_t i = 0; i < count; ++i)
    put(d, i, seq, from + static_cast<std::size_t>(i) * c, context);
  return d;
}

} // namespace gradwire::models::windows
