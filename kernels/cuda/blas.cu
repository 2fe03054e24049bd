#include "kernels/cuda/bias_kernels.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

namespace gradwire::kernels {
namespace {

using cuda_detail::blocks_for;
using cuda_detail::threads_per_block;

__global__ void bias_add_rows_kernel(float* y, const float* b, int rows, int cols) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] += b[i % cols];
}

__global__ void bias_add_nchw_kernel(float* y, const float* b, int n, int c, int hw) {
  const std::size_t total = static_cast<std::size_t>(n) * c * hw;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
    y[i] += b[(i / hw) % c];
}

// One block per channel, a shared-memory tree reduction over (n, hw).
__global__ void bias_grad_nchw_kernel(const float* dy, float* db, int n, int c, int hw) {
  __shared__ float part[threads_per_block];
  const int ch = blockIdx.x;
  float s = 0;
  const std::size_t m = static_cast<std::size_t>(n) * hw;
  for (std::size_t i = threadIdx.x; i < m; i += blockDim.x) {
    const std::size_t img = i / hw, pix = i % hw;
    s += dy[(img * c + ch) * hw + pix];
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step)
      part[threadIdx.x] += part[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    db[ch] += part[0];
}

} // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
// operands and the m/n extents, keep the leading dimensions.
void cuda_backend::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const float* a, int lda, const float* b, int ldb, float beta, float* c,
                        int ldc) {
  if (m == 0 || n == 0)
    return;
  const auto gw_timed = timer_.time(stream_, "gemm");
  const auto op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (math_.load() == gemm_math::fp32) {
    GW_CUBLAS(cublasSgemm(blas_, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
    return;
  }
  // fp32 in memory, bf16 on the Tensor Cores: cuBLAS rounds the operands
  // itself, so this backend keeps no bf16 copy of weights or activations.
  GW_CUBLAS(cublasGemmEx(blas_, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c,
                         CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
}

void cuda_backend::bias_add_rows(float* y, const float* bias, int rows, int cols) {
  const auto gw_timed = timer_.time(stream_, "bias add rows");
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  bias_add_rows_kernel<<<blocks_for(n), threads_per_block, 0, stream_>>>(y, bias, rows, cols);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::bias_grad_rows(const float* dy, float* dbias, int rows, int cols) {
  using namespace cuda_kernels;
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "bias grad rows");
  const int tpb = 128;
  const auto col_blocks = static_cast<unsigned>((cols + tpb - 1) / tpb);
  auto* part = static_cast<float*>(scratch(sizeof(float) * bias_slices * static_cast<std::size_t>(cols)));
  bias_grad_partials<<<dim3(col_blocks, bias_slices), tpb, 0, stream_>>>(dy, part, rows, cols);
  GW_CUDA_LAUNCHED();
  bias_grad_sum<<<col_blocks, tpb, 0, stream_>>>(part, dbias, cols);
  GW_CUDA_LAUNCHED();
  // part stays in the scratch buffer: its next user is queued on the same
  // stream, after these kernels, and growing it synchronises first.
}

void cuda_backend::bias_add_nchw(float* y, const float* bias, int n, int c, int hw) {
  const auto gw_timed = timer_.time(stream_, "bias add nchw");
  const std::size_t total = static_cast<std::size_t>(n) * c * hw;
  bias_add_nchw_kernel<<<blocks_for(total), threads_per_block, 0, stream_>>>(y, bias, n, c, hw);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::bias_grad_nchw(const float* dy, float* dbias, int n, int c, int hw) {
  const auto gw_timed = timer_.time(stream_, "bias grad nchw");
  bias_grad_nchw_kernel<<<c, threads_per_block, 0, stream_>>>(dy, dbias, n, c, hw);
  GW_CUDA_LAUNCHED();
}

} // namespace gradwire::kernels
