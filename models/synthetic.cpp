#include "models/dataset.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <random>

namespace gradwire::models {

dataset make_synthetic(std::int64_t n, int channels, int height, int width, int classes,
                       std::uint64_t seed) {
  check(n > 0 && channels > 0 && height > 0 && width > 0 && classes > 1,
        "synthetic dataset needs positive sizes and at least 2 classes");
  dataset d;
  d.name = "synthetic";
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.classes = classes;
  const auto m = static_cast<std::size_t>(d.sample_numel());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::normal_distribution<float> noise(0.f, 0.35f);
  // Templates come from a fixed stream so train and test sets made with
  // different seeds share the same classes.
  std::mt19937_64 trng(0x9e3779b97f4a7c15ULL);
  std::vector<float> templates(m * static_cast<std::size_t>(classes));
  for (auto& t : templates)
    t = u(trng);
  d.images.resize(m * static_cast<std::size_t>(n));
  d.labels.resize(static_cast<std::size_t>(n));
  std::uniform_int_distribution<int> pick(0, classes - 1);
  for (std::int64_t i = 0; i < n; ++i) {
    const int c = pick(rng);
    d.labels[static_cast<std::size_t>(i)] = c;
    const float* t = templates.data() + m * static_cast<std::size_t>(c);
    float* x = d.images.data() + m * static_cast<std::size_t>(i);
    for (std::size_t j = 0; j < m; ++j)
      x[j] = std::clamp(t[j] + noise(rng), 0.f, 1.f);
  }
  return d;
}

} // namespace gradwire::models
