// The transformer passes' launches (the kernels: transformer_kernels.cuh).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/transformer_kernels.cuh"

#include <string>

namespace gradwire::kernels {
namespace {

using namespace cuda_kernels;

using cuda_detail::blocks_for;
using cuda_detail::threads_per_block;

unsigned row_blocks(int rows) { return static_cast<unsigned>((rows + warps_per_block - 1) / warps_per_block); }

} // namespace

void cuda_backend::layernorm_forward(const float* x, float* y, float* mean, float* rstd, const float* w,
                                     const float* b, int rows, int cols, float eps) {
  const auto gw_timed = timer_.time(stream_, "layernorm fwd");
  layernorm_fwd<<<row_blocks(rows), row_block_threads, 0, stream_>>>(x, y, mean, rstd, w, b, rows, cols, eps);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::layernorm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                                      const float* w, float* dx, float* dw, float* db, int rows, int cols) {
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "layernorm bwd");
  const int tpb = 128;
  const auto col_blocks = static_cast<unsigned>((cols + tpb - 1) / tpb);
  auto* part = static_cast<float*>(scratch(sizeof(float) * 2 * ln_slices * static_cast<std::size_t>(cols)));
  layernorm_bwd_partials<<<dim3(col_blocks, ln_slices), tpb, 0, stream_>>>(x, dy, mean, rstd, part, rows, cols);
  GW_CUDA_LAUNCHED();
  layernorm_bwd_params<<<col_blocks, tpb, 0, stream_>>>(part, dw, db, cols);
  GW_CUDA_LAUNCHED();
  layernorm_bwd_rows<<<row_blocks(rows), row_block_threads, 0, stream_>>>(x, dy, mean, rstd, w, dx, rows, cols);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::dropout(float* x, int rows, int cols, float p, std::uint64_t key, std::int64_t first_row) {
  check_dropout(p, "dropout");
  const auto gw_timed = timer_.time(stream_, "dropout");
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  dropout_apply<<<blocks_for(n), threads_per_block, 0, stream_>>>(
    x, n, make_dropout_mask(p, key), static_cast<std::uint64_t>(first_row) * static_cast<std::uint64_t>(cols));
  GW_CUDA_LAUNCHED();
}

void cuda_backend::gelu_forward(const float* x, float* y, std::size_t n) {
  const auto gw_timed = timer_.time(stream_, "gelu fwd");
  gelu_fwd<<<blocks_for(n), threads_per_block, 0, stream_>>>(x, y, n);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::gelu_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  const auto gw_timed = timer_.time(stream_, "gelu bwd");
  gelu_bwd<<<blocks_for(n), threads_per_block, 0, stream_>>>(x, dy, dx, n);
  GW_CUDA_LAUNCHED();
}

void cuda_backend::embedding_forward(const float* tokens, const float* wte, const float* wpe, float* h, int batch,
                                     int time, int d, int vocab) {
  const int rows = batch * time;
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "embedding fwd");
  auto* bad = static_cast<int*>(scratch(sizeof(int)));
  const int none = 0x7fffffff;
  GW_CUDA(cudaMemcpyAsync(bad, &none, sizeof(int), cudaMemcpyHostToDevice, stream_));
  embedding_fwd<<<blocks_for(static_cast<std::size_t>(rows) * d), threads_per_block, 0, stream_>>>(
    tokens, wte, wpe, h, rows, time, d, vocab, bad);
  GW_CUDA_LAUNCHED();
  int first = none;
  GW_CUDA(cudaMemcpyAsync(&first, bad, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  GW_CUDA(cudaStreamSynchronize(stream_));
  if (first == none)
    return;
  float t = 0;
  GW_CUDA(cudaMemcpy(&t, tokens + first, sizeof(float), cudaMemcpyDeviceToHost));
  throw error("embedding: token " + std::to_string(t) + " at position " + std::to_string(first) +
              " is not an integer in [0, " + std::to_string(vocab) + ") (model.vocab)");
}

void cuda_backend::embedding_backward(const float* tokens, const float* dh, float* dwte, float* dwpe, int batch,
                                      int time, int d, int vocab) {
  const auto gw_timed = timer_.time(stream_, "embedding bwd");
  embedding_bwd_positions<<<blocks_for(static_cast<std::size_t>(time) * d), threads_per_block, 0, stream_>>>(
    dh, dwpe, batch, time, d);
  GW_CUDA_LAUNCHED();
  // Every token was checked by the forward pass.
  embedding_bwd_tokens<<<static_cast<unsigned>(vocab), 128, 0, stream_>>>(tokens, dh, dwte, batch * time, d);
  GW_CUDA_LAUNCHED();
}

} // namespace gradwire::kernels
