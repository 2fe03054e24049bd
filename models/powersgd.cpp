/// @file powersgd.cpp
/// PowerSGD's rank-r factors (models/compress.hpp): one power iteration
/// per step, warm-started from the previous step's Q.

#include "models/compress.hpp"

#include <cmath>
#include <random>

namespace gradwire::models {

namespace {

/// Gram-Schmidt on the r columns of p [rows x r], row-major. A column that
/// is (numerically) zero stays zero rather than dividing by its norm.
void orthonormalize(float* p, std::size_t rows, std::size_t r) {
  for (std::size_t k = 0; k < r; ++k) {
    for (std::size_t j = 0; j < k; ++j) {
      double dot = 0;
      for (std::size_t i = 0; i < rows; ++i)
        dot += static_cast<double>(p[i * r + k]) * p[i * r + j];
      for (std::size_t i = 0; i < rows; ++i)
        p[i * r + k] -= static_cast<float>(dot) * p[i * r + j];
    }
    double norm = 0;
    for (std::size_t i = 0; i < rows; ++i)
      norm += static_cast<double>(p[i * r + k]) * p[i * r + k];
    const float inv = norm > 1e-30 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.f;
    for (std::size_t i = 0; i < rows; ++i)
      p[i * r + k] *= inv;
  }
}

/// p [rows x r] = m [rows x cols] q [cols x r]
void times(const float* m, const float* q, float* p, std::size_t rows, std::size_t cols, std::size_t r) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < r; ++k) {
      float s = 0;
      for (std::size_t j = 0; j < cols; ++j)
        s += m[i * cols + j] * q[j * r + k];
      p[i * r + k] = s;
    }
}

/// q [cols x r] = m^T [cols x rows] p [rows x r]
void times_transposed(const float* m, const float* p, float* q, std::size_t rows, std::size_t cols, std::size_t r) {
  for (std::size_t j = 0; j < cols * r; ++j)
    q[j] = 0.f;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      for (std::size_t k = 0; k < r; ++k)
        q[j * r + k] += m[i * cols + j] * p[i * r + k];
}

/// out [rows x cols] = p [rows x r] q^T [r x cols], times scale
void outer(const float* p, const float* q, float* out, std::size_t rows, std::size_t cols, std::size_t r,
           float scale) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      float s = 0;
      for (std::size_t k = 0; k < r; ++k)
        s += p[i * r + k] * q[j * r + k];
      out[i * cols + j] = scale * s;
    }
}

} // namespace

powersgd::powersgd(compress_spec spec, std::vector<matrix_block> blocks, std::size_t n)
    : spec_(spec), blocks_(std::move(blocks)), n_(n), residual_(n, 0.f), m_(n) {
  check(spec.rank >= 1, "powersgd: the rank must be at least 1");
  std::size_t covered = 0;
  for (const auto& b : blocks_) {
    check(b.offset == covered, "powersgd: the blocks must cover the buffer in order");
    covered += b.rows * b.cols;
    const auto r = static_cast<std::size_t>(spec.rank);
    first_floats_ += compressed(b) ? b.rows * r : b.rows * b.cols;
    second_floats_ += compressed(b) ? b.cols * r : 0;
  }
  check(covered == n, "powersgd: the blocks cover " + std::to_string(covered) + " of " + std::to_string(n) +
                            " values");
  q_.resize(second_floats_);
  std::mt19937_64 rng(spec.seed ^ 0x5057525347440000ull); // the same first Q on every worker
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& v : q_)
    v = normal(rng);
}

bool powersgd::compressed(const matrix_block& b) const {
  const auto r = static_cast<std::size_t>(spec_.rank);
  return b.rows > 1 && r * (b.rows + b.cols) < b.rows * b.cols;
}

std::vector<float> powersgd::first_payload(const float* g) {
  energy_ = {};
  for (std::size_t i = 0; i < n_; ++i) {
    m_[i] = g[i] + residual_[i];
    energy_.total += static_cast<double>(m_[i]) * m_[i];
  }
  std::vector<float> out(first_floats_);
  const auto r = static_cast<std::size_t>(spec_.rank);
  std::size_t at = 0, qat = 0;
  for (const auto& b : blocks_) {
    const float* m = m_.data() + b.offset;
    if (compressed(b)) {
      times(m, q_.data() + qat, out.data() + at, b.rows, b.cols, r);
      at += b.rows * r;
      qat += b.cols * r;
    } else {
      std::copy(m, m + b.rows * b.cols, out.data() + at);
      at += b.rows * b.cols;
    }
  }
  return out;
}

std::vector<float> powersgd::second_payload(const std::vector<float>& summed_first) {
  check(summed_first.size() == first_floats_, "powersgd: the first sum has the wrong size");
  summed_first_ = summed_first;
  p_hat_ = summed_first;
  std::vector<float> out(second_floats_);
  const auto r = static_cast<std::size_t>(spec_.rank);
  std::size_t at = 0, qat = 0;
  for (const auto& b : blocks_) {
    if (!compressed(b)) {
      at += b.rows * b.cols;
      continue;
    }
    orthonormalize(p_hat_.data() + at, b.rows, r);
    times_transposed(m_.data() + b.offset, p_hat_.data() + at, out.data() + qat, b.rows, b.cols, r);
    at += b.rows * r;
    qat += b.cols * r;
  }
  q_own_ = out;
  return out;
}

void powersgd::finish(const std::vector<float>& summed_second, float scale, float* out) {
  check(summed_second.size() == second_floats_, "powersgd: the second sum has the wrong size");
  const auto r = static_cast<std::size_t>(spec_.rank);
  std::size_t at = 0, qat = 0;
  for (const auto& b : blocks_) {
    const std::size_t size = b.rows * b.cols;
    float* res = residual_.data() + b.offset;
    if (!compressed(b)) {
      for (std::size_t i = 0; i < size; ++i)
        out[b.offset + i] = scale * summed_first_[at + i];
      std::fill(res, res + size, 0.f); // sent whole: nothing left over
      at += size;
      continue;
    }
    const float* p = p_hat_.data() + at;
    outer(p, summed_second.data() + qat, out + b.offset, b.rows, b.cols, r, scale);
    // M - P^ Q_i^T: what this worker's own factors do not carry, kept as
    // its residual with error feedback, and counted in energy_ either way.
    std::vector<float> approx(size);
    outer(p, q_own_.data() + qat, approx.data(), b.rows, b.cols, r, 1.f);
    for (std::size_t i = 0; i < size; ++i) {
      const float left = m_[b.offset + i] - approx[i];
      energy_.held += static_cast<double>(left) * left;
      if (spec_.error_feedback)
        res[i] = left;
    }
    std::copy(summed_second.begin() + static_cast<std::ptrdiff_t>(qat),
              summed_second.begin() + static_cast<std::ptrdiff_t>(qat + b.cols * r), q_.begin() + static_cast<std::ptrdiff_t>(qat));
    at += b.rows * r;
    qat += b.cols * r;
  }
}

} // namespace gradwire::models
