#include "kernels/cpu/cpu_backend.hpp"

#include <cmath>

namespace gradwire::kernels {

xent_result cpu_backend::softmax_xent(const float* logits, const std::int32_t* labels, int n,
                                      int classes, float* dlogits, float grad_scale) {
  xent_result res;
  for (int i = 0; i < n; ++i) {
    const float* z = logits + static_cast<std::ptrdiff_t>(i) * classes;
    int best = 0;
    for (int j = 1; j < classes; ++j)
      if (z[j] > z[best])
        best = j;
    const float zmax = z[best];
    double se = 0;
    for (int j = 0; j < classes; ++j)
      se += std::exp(static_cast<double>(z[j] - zmax));
    const int label = labels[i];
    res.loss_sum += std::log(se) - static_cast<double>(z[label] - zmax);
    res.correct += (best == label);
    if (dlogits != nullptr) {
      float* d = dlogits + static_cast<std::ptrdiff_t>(i) * classes;
      const double inv = 1.0 / se;
      for (int j = 0; j < classes; ++j) {
        const double p = std::exp(static_cast<double>(z[j] - zmax)) * inv;
        d[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * grad_scale);
      }
    }
  }
  return res;
}

} // namespace gradwire::kernels
