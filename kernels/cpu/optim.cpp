#include "kernels/cpu/cpu_backend.hpp"

#include <cmath>

namespace gradwire::kernels {

void cpu_backend::sgd_update(std::size_t n, float lr, float momentum, float weight_decay,
                             bool nesterov, float* w, const float* g, float* v) {
  if (momentum == 0.f) {
    for (std::size_t i = 0; i < n; ++i)
      w[i] -= lr * (g[i] + weight_decay * w[i]);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i] + weight_decay * w[i];
    const float vi = momentum * v[i] + gi;
    v[i] = vi;
    w[i] -= lr * (nesterov ? gi + momentum * vi : vi);
  }
}

void cpu_backend::adam_update(std::size_t n, float lr, float beta1, float beta2, float eps,
                              float weight_decay, std::int64_t step, float* w, const float* g,
                              float* m, float* v) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i] + weight_decay * w[i];
    m[i] = beta1 * m[i] + (1.f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.f - beta2) * gi * gi;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

} // namespace gradwire::kernels

namespace gradwire::kernels::cpu {

namespace {

// One loop per case so that each vectorises without branches; the gradient
// expression matches cpu_backend::add's ((g0 + g1) * s) so that results are
// bitwise those of add + sgd_update.
template <bool Two, bool Out>
void sgd_sum_loop(std::size_t n, float lr, float momentum, float wd, bool nesterov, float* w,
                  const float* g0, const float* g1, float s, float* v, float* w_out) {
  for (std::size_t i = 0; i < n; ++i) {
    const float g = Two ? (g0[i] + g1[i]) * s : g0[i] * s;
    const float gi = g + wd * w[i];
    float wi;
    if (v == nullptr) {
      wi = w[i] - lr * gi;
    } else {
      const float vi = momentum * v[i] + gi;
      v[i] = vi;
      wi = w[i] - lr * (nesterov ? gi + momentum * vi : vi);
    }
    w[i] = wi;
    if (Out)
      w_out[i] = wi;
  }
}

} // namespace

void sgd_update_sum(std::size_t n, float lr, float momentum, float weight_decay, bool nesterov,
                    float* w, const float* g0, const float* g1, float s, float* v, float* w_out) {
  if (momentum == 0.f)
    v = nullptr;
  if (g1 != nullptr)
    w_out != nullptr ? sgd_sum_loop<true, true>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out)
                     : sgd_sum_loop<true, false>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out);
  else
    w_out != nullptr ? sgd_sum_loop<false, true>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out)
                     : sgd_sum_loop<false, false>(n, lr, momentum, weight_decay, nesterov, w, g0, g1, s, v, w_out);
}

} // namespace gradwire::kernels::cpu
