#pragma once
/// @file common.cuh
/// Error checks and launch helpers shared by the CUDA kernels. Every check
/// throws gradwire::error naming the call, file and line.

#include "kernels/error.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <string>

namespace gradwire::kernels::cuda_detail {

inline void throw_cuda(const char* what, const std::string& reason, const char* file, int line) {
  throw error(std::string("CUDA error in ") + what + " at " + file + ":" + std::to_string(line) +
              ": " + reason);
}

} // namespace gradwire::kernels::cuda_detail

#define GW_CUDA(call)                                                                          \
  do {                                                                                         \
    cudaError_t gw_e_ = (call);                                                                \
    if (gw_e_ != cudaSuccess)                                                                  \
      ::gradwire::kernels::cuda_detail::throw_cuda(#call, cudaGetErrorString(gw_e_), __FILE__, \
                                                   __LINE__);                                  \
  } while (0)

#define GW_CUBLAS(call)                                                                        \
  do {                                                                                         \
    cublasStatus_t gw_s_ = (call);                                                             \
    if (gw_s_ != CUBLAS_STATUS_SUCCESS)                                                        \
      ::gradwire::kernels::cuda_detail::throw_cuda(#call, cublasGetStatusString(gw_s_),        \
                                                   __FILE__, __LINE__);                        \
  } while (0)

#define GW_CUDNN(call)                                                                         \
  do {                                                                                         \
    cudnnStatus_t gw_s_ = (call);                                                              \
    if (gw_s_ != CUDNN_STATUS_SUCCESS)                                                         \
      ::gradwire::kernels::cuda_detail::throw_cuda(#call, cudnnGetErrorString(gw_s_),          \
                                                   __FILE__, __LINE__);                        \
  } while (0)

/// Checks the last kernel launch.
#define GW_CUDA_LAUNCHED() GW_CUDA(cudaGetLastError())

namespace gradwire::kernels::cuda_detail {

constexpr int threads_per_block = 256;

/// Streaming multiprocessors of the current device (read once; 80 if unknown).
inline int sm_count() {
  static const int sms = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v > 0 ? v : 80;
  }();
  return sms;
}

/// Threads for a block along a row of n values: a warp multiple, at most 256.
inline int row_threads(int n) { return std::min(threads_per_block, (n + 31) / 32 * 32); }

inline unsigned blocks_for(std::size_t n) {
  std::size_t b = (n + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(b < 65535 ? (b == 0 ? 1 : b) : 65535);
}

} // namespace gradwire::kernels::cuda_detail
