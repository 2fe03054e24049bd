#pragma once
/// @file norm_common.hpp
/// What BatchNorm's NCHW kernels (norm.cpp) and its blocked ones
/// (norm_blocked.cpp) share: one channel's statistics from its sums, the
/// scale and shift of evaluation, and the gradient under a ReLU's mask.
/// Both files compile without FMA contraction, so these give both the
/// same bits from the same sums.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace gradwire::kernels::bn {

/// y = x * a + b normalises a channel.
struct scale {
  float a, b;
};

/// Channel `ch` from the sum `s` and sum of squares `ss` of its `m` values:
/// saves mean and inverse std, updates the running statistics when given
/// (unbiased variance, as PyTorch), returns the normalising scale.
inline scale train_channel(double s, double ss, double m, int ch, const float* gamma, const float* beta,
                           float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                           float momentum, float eps) {
  const double mean = s / m;
  const double var = std::max(0.0, ss / m - mean * mean);
  const float invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
  save_mean[ch] = static_cast<float>(mean);
  save_invstd[ch] = invstd;
  if (running_mean != nullptr && running_var != nullptr) {
    const double unbiased = m > 1 ? var * m / (m - 1) : var;
    running_mean[ch] = static_cast<float>((1 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<float>((1 - momentum) * running_var[ch] + momentum * unbiased);
  }
  const float a = gamma[ch] * invstd;
  return {a, beta[ch] - static_cast<float>(mean) * a};
}

/// Channel `ch`'s scale in evaluation, from the running statistics.
inline scale eval_channel(int ch, const float* gamma, const float* beta, const float* running_mean,
                          const float* running_var, float eps) {
  const float a = gamma[ch] / std::sqrt(running_var[ch] + eps);
  return {a, beta[ch] - running_mean[ch] * a};
}

/// Without a mask, dy as it is; with one (relu_y), dy where relu_y > 0, else
/// +0 (relu_backward's bits). Written as a bitwise and: as a select, GCC 12
/// left the reduction loop scalar, and the fused backward lost to
/// BatchNorm's and ReLU's apart (bench/RESULTS.md, "Figures behind the code").
template <bool Masked>
inline float grad_at(const float* dy, const float* relu_y, std::ptrdiff_t i) {
  if constexpr (Masked) {
    const std::uint32_t keep = relu_y[i] > 0.f ? ~std::uint32_t{0} : 0u;
    return __builtin_bit_cast(float, __builtin_bit_cast(std::uint32_t, dy[i]) & keep);
  } else {
    return dy[i];
  }
}

} // namespace gradwire::kernels::bn
