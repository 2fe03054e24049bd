#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>

// Convolution through cuDNN with fixed, always-supported algorithms for NCHW
// float (implicit precomputed GEMM forward, algo 1 for both backward
// passes), so results are deterministic and the workspace size is known up
// front. Descriptors are created per call: they are host-side and cheap next
// to the kernels they describe.

namespace gradwire::kernels {
namespace {

constexpr auto fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
constexpr auto bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
constexpr auto bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;

/// RAII set of the four descriptors of one convolution.
struct conv_descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  explicit conv_descs(const conv_geom& g) {
    GW_CUDNN(cudnnCreateTensorDescriptor(&x));
    GW_CUDNN(cudnnCreateTensorDescriptor(&y));
    GW_CUDNN(cudnnCreateFilterDescriptor(&w));
    GW_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
    GW_CUDNN(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c, g.h, g.w));
    GW_CUDNN(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k, g.out_h(),
                                        g.out_w()));
    GW_CUDNN(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.k, g.c, g.r, g.s));
    GW_CUDNN(cudnnSetConvolution2dDescriptor(conv, g.pad, g.pad, g.stride, g.stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  }
  ~conv_descs() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  conv_descs(const conv_descs&) = delete;
  conv_descs& operator=(const conv_descs&) = delete;
};

} // namespace

std::size_t cuda_backend::conv2d_workspace_bytes(const conv_geom& g) {
  conv_descs d(g);
  std::size_t f = 0, bd = 0, bf = 0;
  GW_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(dnn_, d.x, d.w, d.conv, d.y, fwd_algo, &f));
  GW_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn_, d.w, d.y, d.conv, d.x, bwd_data_algo, &bd));
  GW_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn_, d.x, d.y, d.conv, d.w, bwd_filter_algo, &bf));
  return std::max({f, bd, bf});
}

void cuda_backend::conv2d_forward(const conv_geom& g, const float* x, const float* w, float* y,
                                  void* workspace) {
  conv_descs d(g);
  const float one = 1.f, zero = 0.f;
  GW_CUDNN(cudnnConvolutionForward(dnn_, &one, d.x, x, d.w, w, d.conv, fwd_algo, workspace,
                                   conv2d_workspace_bytes(g), &zero, d.y, y));
}

void cuda_backend::conv2d_backward(const conv_geom& g, const float* x, const float* w,
                                   const float* dy, float* dx, float* dw, void* workspace) {
  conv_descs d(g);
  const float one = 1.f, zero = 0.f;
  const std::size_t ws = conv2d_workspace_bytes(g);
  GW_CUDNN(cudnnConvolutionBackwardFilter(dnn_, &one, d.x, x, d.y, dy, d.conv, bwd_filter_algo,
                                          workspace, ws, &one, d.w, dw));
  if (dx != nullptr)
    GW_CUDNN(cudnnConvolutionBackwardData(dnn_, &one, d.w, w, d.y, dy, d.conv, bwd_data_algo,
                                          workspace, ws, &zero, d.x, dx));
}

} // namespace gradwire::kernels
