#include "kernels/cpu/cpu_backend.hpp"

namespace gradwire::kernels {

void cpu_backend::relu_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void cpu_backend::relu_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

void cpu_backend::axpy(std::size_t n, float a, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i)
    y[i] += a * x[i];
}

void cpu_backend::scale(std::size_t n, float a, float* x) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] *= a;
}

void cpu_backend::add(std::size_t n, const float* x0, const float* x1, float* y) {
  for (std::size_t i = 0; i < n; ++i)
    y[i] = x0[i] + x1[i];
}

double cpu_backend::sum(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s += x[i];
  return s;
}

} // namespace gradwire::kernels
