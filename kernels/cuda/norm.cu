#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>

// Batch normalisation per channel over (N, H, W), NCHW, as the CPU
// reference computes it (kernels/cpu/norm.cpp): sums in double, biased
// variance to normalise, unbiased into the running estimate, inverse std
// saved for backward.
//
// Hand-written rather than cuDNN's: cuDNN's NCHW FP32 batch norm ran
// far from the memory traffic it needs on ResNet-20's tensors, and took a
// quarter of a step (bench/gpu_profile.sh; bench/RESULTS.md, "GPU (H200): ResNet-20's weight gradients and BatchNorm").
// PyTorch calls the same cuDNN kernels.
//
// Each pass over the data is one grid of (channel, slice) blocks: a slice
// is a fixed run of images, so every channel has blocks enough to fill the
// GPU at any batch size. Blocks write their partial sums; one thread per
// channel adds them in slice order. A run repeats itself bit for bit.

namespace gradwire::kernels {
namespace {

constexpr int bn_threads = 256;

/// Slices per channel: about two blocks per SM in all, at most one per image,
/// and enough that one slice holds under 2^31 values (its index is 32-bit).
int slices_for(int n, int c, int hw) {
  const int sms = cuda_detail::sm_count();
  const long long fit = (static_cast<long long>(n) * hw + (1LL << 31) - 1) >> 31;
  return static_cast<int>(std::max<long long>({1, fit, std::min(n, (2 * sms + c - 1) / c)}));
}

/// Block-wide sum of two doubles, in a fixed order; thread 0 gets the result.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[bn_threads], sb[bn_threads];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int step = bn_threads / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) {
      sa[threadIdx.x] += sa[threadIdx.x + step];
      sb[threadIdx.x] += sb[threadIdx.x + step];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
}

/// Where channel `ch`'s slice `s` keeps its two partial sums.
__device__ std::size_t pair_at(int ch, int slices, int s) {
  return 2 * (static_cast<std::size_t>(ch) * slices + s);
}

/// Channel `ch`'s two sums over all its slices, added in slice order.
__device__ void add_slices(const double* part, int ch, int slices, double& a, double& b) {
  a = 0;
  b = 0;
  for (int i = 0; i < slices; ++i) {
    a += part[pair_at(ch, slices, i)];
    b += part[pair_at(ch, slices, i) + 1];
  }
}

/// The images [first, last) of slice `s` among `slices`.
__device__ void slice_range(int n, int slices, int s, int& first, int& last) {
  first = static_cast<int>(static_cast<long long>(n) * s / slices);
  last = static_cast<int>(static_cast<long long>(n) * (s + 1) / slices);
}

// Forward partials: sum x and sum x^2 over the slice's images of one channel.
__global__ void bn_fwd_partials(const float* x, int n, int c, int hw, int slices, double* part) {
  const int ch = blockIdx.x, s = blockIdx.y;
  int first = 0, last = 0;
  slice_range(n, slices, s, first, last);
  const unsigned count = static_cast<unsigned>(last - first) * static_cast<unsigned>(hw);
  double sum = 0, sq = 0;
  for (unsigned t = threadIdx.x; t < count; t += bn_threads) {
    const std::size_t img = first + t / hw, j = t % hw;
    const float v = x[(img * c + ch) * hw + j];
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  block_sum2(sum, sq);
  if (threadIdx.x == 0) {
    part[pair_at(ch, slices, s)] = sum;
    part[pair_at(ch, slices, s) + 1] = sq;
  }
}

// Per channel: statistics, running estimates, and y = x * a + b's a and b.
__global__ void bn_fwd_stats(const double* part, int c, int slices, double m, const float* gamma,
                             const float* beta, float* save_mean, float* save_invstd,
                             float* running_mean, float* running_var, float momentum, float eps,
                             float* ab) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c)
    return;
  double s = 0, ss = 0;
  add_slices(part, ch, slices, s, ss);
  const double mean = s / m;
  const double var = fmax(0.0, ss / m - mean * mean);
  const float invstd = static_cast<float>(1.0 / sqrt(var + eps));
  save_mean[ch] = static_cast<float>(mean);
  save_invstd[ch] = invstd;
  if (running_mean != nullptr && running_var != nullptr) {
    const double unbiased = m > 1 ? var * m / (m - 1) : var;
    running_mean[ch] = static_cast<float>((1 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<float>((1 - momentum) * running_var[ch] + momentum * unbiased);
  }
  const float a = gamma[ch] * invstd;
  ab[2 * ch] = a;
  ab[2 * ch + 1] = beta[ch] - static_cast<float>(mean) * a;
}

__global__ void bn_eval_coeffs(int c, const float* gamma, const float* beta, const float* rm,
                               const float* rv, float eps, float* ab) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c)
    return;
  const float a = gamma[ch] / sqrtf(rv[ch] + eps);
  ab[2 * ch] = a;
  ab[2 * ch + 1] = beta[ch] - rm[ch] * a;
}

// y = x * a[ch] + b[ch], max(0, .) of it with relu; block (plane, part)
// covers a part of one image's channel plane (no division per element).
__global__ void bn_apply(const float* x, float* y, int c, int hw, const float* ab, bool relu) {
  const int ch = static_cast<int>(blockIdx.x % c);
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= hw)
    return;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * hw + j;
  const float v = __fadd_rn(__fmul_rn(x[i], ab[2 * ch]), ab[2 * ch + 1]);
  y[i] = relu ? (v > 0.f ? v : 0.f) : v;
}

// dy, or with a mask (the output of a forward with relu) dy where it is > 0.
__device__ __forceinline__ float grad_at(const float* dy, const float* relu_y, std::size_t i) {
  return relu_y == nullptr || relu_y[i] > 0.f ? dy[i] : 0.f;
}

// Backward partials: sum dy and sum dy * xhat over the slice's images.
__global__ void bn_bwd_partials(const float* x, const float* dy, const float* relu_y, int n, int c, int hw,
                                int slices, const float* save_mean, const float* save_invstd, double* part) {
  const int ch = blockIdx.x, s = blockIdx.y;
  int first = 0, last = 0;
  slice_range(n, slices, s, first, last);
  const float mean = save_mean[ch], invstd = save_invstd[ch];
  const unsigned count = static_cast<unsigned>(last - first) * static_cast<unsigned>(hw);
  double sdy = 0, sdyx = 0;
  for (unsigned t = threadIdx.x; t < count; t += bn_threads) {
    const std::size_t img = first + t / hw, j = t % hw;
    const std::size_t at = (img * c + ch) * hw + j;
    const float g = grad_at(dy, relu_y, at);
    sdy += g;
    sdyx += static_cast<double>(g) * __fsub_rn(x[at], mean) * invstd;
  }
  block_sum2(sdy, sdyx);
  if (threadIdx.x == 0) {
    part[pair_at(ch, slices, s)] = sdy;
    part[pair_at(ch, slices, s) + 1] = sdyx;
  }
}

// Per channel: dgamma and dbeta (accumulated) and dx's coefficients.
__global__ void bn_bwd_stats(const double* part, int c, int slices, double m, const float* gamma,
                             const float* save_invstd, float* dgamma, float* dbeta, float* coef) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c)
    return;
  double sdy = 0, sdyx = 0;
  add_slices(part, ch, slices, sdy, sdyx);
  dgamma[ch] += static_cast<float>(sdyx);
  dbeta[ch] += static_cast<float>(sdy);
  coef[3 * ch] = gamma[ch] * save_invstd[ch];
  coef[3 * ch + 1] = static_cast<float>(sdy / m);
  coef[3 * ch + 2] = static_cast<float>(sdyx / m);
}

// dx = k * (dy - mean(dy) - xhat * mean(dy * xhat)).
__global__ void bn_bwd_apply(const float* x, const float* dy, const float* relu_y, float* dx, int c, int hw,
                             const float* save_mean, const float* save_invstd, const float* coef) {
  const int ch = static_cast<int>(blockIdx.x % c);
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j < hw) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * hw + j;
    const float xhat = __fmul_rn(__fsub_rn(x[i], save_mean[ch]), save_invstd[ch]);
    const float inner =
      __fsub_rn(__fsub_rn(grad_at(dy, relu_y, i), coef[3 * ch + 1]), __fmul_rn(xhat, coef[3 * ch + 2]));
    dx[i] = __fmul_rn(coef[3 * ch], inner);
  }
}

/// The apply kernels' grid: a block per (image, channel) plane and part of it.
dim3 apply_grid(int n, int c, int hw) {
  return dim3(static_cast<unsigned>(n) * static_cast<unsigned>(c),
              static_cast<unsigned>((hw + cuda_detail::row_threads(hw) - 1) / cuda_detail::row_threads(hw)));
}

} // namespace

void cuda_backend::batchnorm_forward_train(const float* x, float* y, int n, int c, int hw,
                                           const float* gamma, const float* beta,
                                           float* save_mean, float* save_invstd,
                                           float* running_mean, float* running_var,
                                           float momentum, float eps, bool relu) {
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "bn fwd", n, c, hw);
  const int slices = slices_for(n, c, hw);
  const std::size_t part_bytes = sizeof(double) * 2 * static_cast<std::size_t>(c) * slices;
  auto* base = static_cast<char*>(scratch(part_bytes + sizeof(float) * 2 * static_cast<std::size_t>(c)));
  auto* part = reinterpret_cast<double*>(base);
  auto* ab = reinterpret_cast<float*>(base + part_bytes);
  bn_fwd_partials<<<dim3(c, slices), bn_threads, 0, stream_>>>(x, n, c, hw, slices, part);
  GW_CUDA_LAUNCHED();
  bn_fwd_stats<<<(c + 127) / 128, 128, 0, stream_>>>(
    part, c, slices, static_cast<double>(n) * hw, gamma, beta, save_mean, save_invstd,
    running_mean, running_var, momentum, eps, ab);
  GW_CUDA_LAUNCHED();
  bn_apply<<<apply_grid(n, c, hw), cuda_detail::row_threads(hw), 0, stream_>>>(x, y, c, hw, ab, relu);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::batchnorm_forward_eval(const float* x, float* y, int n, int c, int hw,
                                          const float* gamma, const float* beta,
                                          const float* running_mean, const float* running_var,
                                          float eps, bool relu) {
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "bn eval", n, c, hw);
  auto* ab = static_cast<float*>(scratch(sizeof(float) * 2 * static_cast<std::size_t>(c)));
  bn_eval_coeffs<<<(c + 127) / 128, 128, 0, stream_>>>(c, gamma, beta, running_mean, running_var,
                                                       eps, ab);
  GW_CUDA_LAUNCHED();
  bn_apply<<<apply_grid(n, c, hw), cuda_detail::row_threads(hw), 0, stream_>>>(x, y, c, hw, ab, relu);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::batchnorm_backward(const float* x, const float* dy, float* dx, int n, int c,
                                      int hw, const float* gamma, const float* save_mean,
                                      const float* save_invstd, float* dgamma, float* dbeta,
                                      const float* relu_y) {
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "bn bwd", n, c, hw);
  const int slices = slices_for(n, c, hw);
  const std::size_t part_bytes = sizeof(double) * 2 * static_cast<std::size_t>(c) * slices;
  auto* base = static_cast<char*>(scratch(part_bytes + sizeof(float) * 3 * static_cast<std::size_t>(c)));
  auto* part = reinterpret_cast<double*>(base);
  auto* coef = reinterpret_cast<float*>(base + part_bytes);
  bn_bwd_partials<<<dim3(c, slices), bn_threads, 0, stream_>>>(x, dy, relu_y, n, c, hw, slices, save_mean,
                                                               save_invstd, part);
  GW_CUDA_LAUNCHED();
  bn_bwd_stats<<<(c + 127) / 128, 128, 0, stream_>>>(part, c, slices, static_cast<double>(n) * hw,
                                                     gamma, save_invstd, dgamma, dbeta, coef);
  GW_CUDA_LAUNCHED();
  bn_bwd_apply<<<apply_grid(n, c, hw), cuda_detail::row_threads(hw), 0, stream_>>>(x, dy, relu_y, dx, c, hw,
                                                                         save_mean, save_invstd, coef);
  GW_CUDA_LAUNCHED();
}

} // namespace gradwire::kernels
