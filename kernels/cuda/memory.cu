#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

namespace gradwire::kernels {
namespace {

__global__ void fill_kernel(float* x, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = v;
}

} // namespace

cuda_backend::cuda_backend(int index) : index_(index) {
  GW_CUDA(cudaSetDevice(index_));
  GW_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GW_CUBLAS(cublasCreate(&blas_));
  GW_CUBLAS(cublasSetStream(blas_, stream_));
  GW_CUDNN(cudnnCreate(&dnn_));
  GW_CUDNN(cudnnSetStream(dnn_, stream_));
}

cuda_backend::~cuda_backend() {
  cudaSetDevice(index_);
  if (scratch_ != nullptr)
    cudaFree(scratch_);
  if (dnn_ != nullptr)
    cudnnDestroy(dnn_);
  if (blas_ != nullptr)
    cublasDestroy(blas_);
  if (stream_ != nullptr)
    cudaStreamDestroy(stream_);
}

std::shared_ptr<storage> cuda_backend::allocate(std::size_t bytes) {
  GW_CUDA(cudaSetDevice(index_));
  void* p = nullptr;
  if (bytes > 0)
    GW_CUDA(cudaMalloc(&p, bytes));
  const int idx = index_;
  held_->add(bytes);
  return std::make_shared<storage>(p, bytes, dev(), [idx, bytes, held = held_](void* q) {
    cudaSetDevice(idx);
    cudaFree(q);
    held->sub(bytes);
  });
}

void held_bytes::add(std::size_t n) {
  const std::size_t after = now.fetch_add(n) + n;
  std::size_t seen = peak.load();
  while (after > seen && !peak.compare_exchange_weak(seen, after)) {
  }
}

void cuda_backend::copy_bytes(void* dst, device dst_dev, const void* src, device src_dev,
                              std::size_t bytes) {
  if (bytes == 0)
    return;
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  if (dst_dev.is_cpu() && src_dev.is_cpu())
    kind = cudaMemcpyHostToHost;
  else if (dst_dev.is_cpu())
    kind = cudaMemcpyDeviceToHost;
  else if (src_dev.is_cpu())
    kind = cudaMemcpyHostToDevice;
  GW_CUDA(cudaSetDevice(index_));
  const auto gw_timed = timer_.time(stream_, kind == cudaMemcpyHostToDevice   ? "copy to GPU"
                                             : kind == cudaMemcpyDeviceToHost ? "copy to host"
                                                                              : "copy");
  GW_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
  GW_CUDA(cudaStreamSynchronize(stream_));
}

void cuda_backend::fill(float* x, std::size_t n, float value) {
  const auto gw_timed = timer_.time(stream_, "fill");
  fill_kernel<<<cuda_detail::blocks_for(n), cuda_detail::threads_per_block, 0, stream_>>>(x, n, value);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::synchronize() {
  GW_CUDA(cudaStreamSynchronize(stream_));
  timer_.synchronized();
}

void* cuda_backend::scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_) {
    GW_CUDA(cudaStreamSynchronize(stream_));
    if (scratch_ != nullptr)
      GW_CUDA(cudaFree(scratch_));
    held_->sub(scratch_bytes_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    GW_CUDA(cudaMalloc(&scratch_, bytes));
    scratch_bytes_ = bytes;
    held_->add(bytes);
  }
  return scratch_;
}

} // namespace gradwire::kernels
