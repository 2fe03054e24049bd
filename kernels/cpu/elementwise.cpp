#include "kernels/cpu/clones.hpp"
#include "kernels/cpu/cpu_backend.hpp"

namespace gradwire::kernels {
namespace {

// Element by element, so the vector width changes no result: compiled for
// AVX-512 and AVX2 beside the SSE2 baseline (clones.hpp).
GW_CLONES void relu_fwd(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}

GW_CLONES void relu_bwd(const float* y, const float* dy, float* dx, std::size_t n) {
  const float* __restrict out = y;
  const float* __restrict grad = dy;
  float* __restrict res = dx;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float v = out[i];
    res[i] = v > 0.f ? g : 0.f;
  }
}

GW_CLONES void add_unscaled(std::size_t n, const float* x0, const float* x1, float* y) {
  for (std::size_t i = 0; i < n; ++i)
    y[i] = x0[i] + x1[i];
}

} // namespace

// ReLU loads both operands unconditionally through restrict pointers so
// GCC vectorises it as compare + and (checked with objdump). The plain
// `y > 0 ? dy : 0` compiled to a scalar branch (the dy load may not be
// hoisted), mispredicted on half of the random signs: ~4 ns an element.
// relu_forward may run in place (x == y: linear layers fuse it), so no
// restrict there; GCC still vectorises it (with a run-time overlap check).
void cpu_backend::relu_forward(const float* x, float* y, std::size_t n) { relu_fwd(x, y, n); }

void cpu_backend::relu_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  relu_bwd(y, dy, dx, n);
}

void cpu_backend::axpy(std::size_t n, float a, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i)
    y[i] += a * x[i];
}

void cpu_backend::scale(std::size_t n, float a, float* x) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] *= a;
}

void cpu_backend::add(std::size_t n, const float* x0, const float* x1, float* y, float s) {
  if (s == 1.f)
    return add_unscaled(n, x0, x1, y);
  for (std::size_t i = 0; i < n; ++i)
    y[i] = (x0[i] + x1[i]) * s;
}

double cpu_backend::sum(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s += x[i];
  return s;
}

double cpu_backend::sum_squares(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s += static_cast<double>(x[i]) * x[i];
  return s;
}

} // namespace gradwire::kernels
