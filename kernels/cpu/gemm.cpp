#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/onednn_gemm.hpp"

#include <cblas.h>

namespace gradwire::kernels {

void cpu_backend::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                       const float* a, int lda, const float* b, int ldb, float beta, float* c,
                       int ldc) {
  if (m == 0 || n == 0)
    return;
  if (gemm_choice(trans_a, trans_b, m, n, k) == gemm_library::onednn &&
      onednn_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cpu_backend::bias_add_rows(float* y, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* yr = y + static_cast<std::ptrdiff_t>(r) * cols;
    for (int j = 0; j < cols; ++j)
      yr[j] += bias[j];
  }
}

void cpu_backend::bias_grad_rows(const float* dy, float* dbias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* dr = dy + static_cast<std::ptrdiff_t>(r) * cols;
    for (int j = 0; j < cols; ++j)
      dbias[j] += dr[j];
  }
}

void cpu_backend::bias_add_nchw(float* y, const float* bias, int n, int c, int hw) {
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch) {
      float* p = y + (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
      const float b = bias[ch];
      for (int j = 0; j < hw; ++j)
        p[j] += b;
    }
}

void cpu_backend::bias_grad_nchw(const float* dy, float* dbias, int n, int c, int hw) {
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch) {
      const float* p = dy + (static_cast<std::ptrdiff_t>(i) * c + ch) * hw;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < hw; ++j)
        s += p[j];
      dbias[ch] += s;
    }
}

} // namespace gradwire::kernels
