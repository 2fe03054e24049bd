#pragma once
/// @file bias_kernels.cuh
/// A bias's gradient, db[j] += the sum over rows of dy[r, j] (blas.cu's
/// bias_grad_rows). A linear layer's rows are a batch of samples, or of
/// tokens in a transformer, thousands of them over a few hundred columns:
/// so the rows are cut into `bias_slices` fixed slices, a thread sums one
/// column of one slice in row order (neighbouring threads read neighbouring
/// columns, so a warp's loads are coalesced), and a second pass adds each
/// column's slices in order. Enough blocks to fill a GPU at any shape, and
/// no atomics: a run repeats itself bit for bit. Plain CUDA C++ that calls
/// no runtime: the CPU suite runs it on the host too
/// (tests/kernels/test_cuda_on_host.cpp).

#include "kernels/cuda/device_code.cuh"

namespace gradwire::kernels::cuda_kernels {
namespace { // each file that includes these has its own copy

constexpr int bias_slices = 64;

/// part[s][j] = the sum of dy[r, j] over slice s's rows, in order.
__global__ void bias_grad_partials(const float* dy, float* part, int rows, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
  if (j >= cols)
    return;
  const int per = (rows + bias_slices - 1) / bias_slices, end = min(rows, (s + 1) * per);
  float sum = 0.f;
  for (int r = s * per; r < end; ++r)
    sum += dy[static_cast<std::size_t>(r) * cols + j];
  part[static_cast<std::size_t>(s) * cols + j] = sum;
}

/// db[j] += its slices' sums, in slice order.
__global__ void bias_grad_sum(const float* part, float* db, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols)
    return;
  float sum = 0.f;
  for (int s = 0; s < bias_slices; ++s)
    sum += part[static_cast<std::size_t>(s) * cols + j];
  db[j] += sum;
}

} // namespace
} // namespace gradwire::kernels::cuda_kernels
