#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <vector>

namespace gradwire::kernels {
namespace {

// One thread per row (class counts are small: 10 for the datasets here).
__global__ void xent_kernel(const float* logits, const std::int32_t* labels, int n, int classes,
                            float* dlogits, float scale, double* row_loss, int* row_correct) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  const float* z = logits + static_cast<std::size_t>(i) * classes;
  int best = 0;
  for (int j = 1; j < classes; ++j)
    if (z[j] > z[best])
      best = j;
  const float zmax = z[best];
  double se = 0;
  for (int j = 0; j < classes; ++j)
    se += exp(static_cast<double>(z[j] - zmax));
  const int label = labels[i];
  row_loss[i] = log(se) - static_cast<double>(z[label] - zmax);
  row_correct[i] = best == label;
  if (dlogits != nullptr) {
    float* d = dlogits + static_cast<std::size_t>(i) * classes;
    for (int j = 0; j < classes; ++j) {
      const double p = exp(static_cast<double>(z[j] - zmax)) / se;
      d[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * scale);
    }
  }
}

} // namespace

xent_result cuda_backend::softmax_xent(const float* logits, const std::int32_t* labels, int n,
                                       int classes, float* dlogits, float grad_scale) {
  const std::size_t loss_bytes = sizeof(double) * static_cast<std::size_t>(n);
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "softmax xent");
  auto* base = static_cast<char*>(scratch(loss_bytes + sizeof(int) * static_cast<std::size_t>(n)));
  auto* row_loss = reinterpret_cast<double*>(base);
  auto* row_correct = reinterpret_cast<int*>(base + loss_bytes);
  const int tpb = 128;
  xent_kernel<<<(n + tpb - 1) / tpb, tpb, 0, stream_>>>(logits, labels, n, classes, dlogits,
                                                        grad_scale, row_loss, row_correct);
  GW_CUDA_LAUNCHED();
  std::vector<double> loss(static_cast<std::size_t>(n));
  std::vector<int> correct(static_cast<std::size_t>(n));
  GW_CUDA(cudaMemcpyAsync(loss.data(), row_loss, loss_bytes, cudaMemcpyDeviceToHost, stream_));
  GW_CUDA(cudaMemcpyAsync(correct.data(), row_correct, sizeof(int) * correct.size(),
                          cudaMemcpyDeviceToHost, stream_));
  GW_CUDA(cudaStreamSynchronize(stream_));
  xent_result res;
  for (int i = 0; i < n; ++i) {
    res.loss_sum += loss[static_cast<std::size_t>(i)];
    res.correct += correct[static_cast<std::size_t>(i)];
  }
  return res;
}

} // namespace gradwire::kernels
