#pragma once
/// @file cuda_backend.hpp
/// The CUDA backend: cuBLAS for GEMM, cuDNN for convolution, hand-written
/// kernels for the rest (batch norm, the transformer's passes, attention). All work goes to one stream per device;
/// results read back by the host (loss, sums) synchronise that stream.
/// One backend serves every worker on its device, from their own threads
/// (several workers may share a GPU): kernel launches and cuBLAS calls are
/// safe from any thread, but a cuDNN handle may not be used by two threads
/// at once and the scratch buffer holds one read-back at a time, so those
/// calls hold `host_mu_`.

#include "kernels/backend.hpp"
#include "kernels/cuda/op_timer.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

namespace gradwire::kernels {

/// How wgrad.cu computes one geometry's weight gradient as GEMMs: images in
/// groups of `group`, `groups` in all, `groups_per_chunk` at a time.
struct wgrad_shape {
  int group = 1, groups = 1, groups_per_chunk = 1;
  bool usable = true; ///< within the kernels' grid limits (else cuDNN's path)
  /// Groups of about `reduction` / (P*Q) images (at least one, at most the batch).
  void choose(const conv_geom& g, int reduction);
  /// Device scratch the GEMM path needs (columns, grouped dy, partial sums).
  std::size_t scratch_bytes(const conv_geom& g) const;
};

/// Whether wgrad_direct.cu handles `g` (3x3 or 1x1, stride 1 or 2, rows
/// that fit its shared memory).
bool wgrad_direct_fits(const conv_geom& g);

/// One convolution geometry's cuDNN descriptors and algorithms, chosen once
/// (conv.cu) and kept: descriptors are made and algorithms looked up only on
/// the first call with that geometry.
struct conv_plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  std::size_t workspace = 0; ///< bytes, the largest of the three algorithms'
  /// Where the weight gradient is computed: cuDNN, GEMMs (wgrad.cu) or
  /// the direct kernel (wgrad_direct.cu); the fastest on this GPU.
  enum class wgrad_path { cudnn, gemm, direct } wgrad_by = wgrad_path::cudnn;
  wgrad_shape wgrad; ///< for wgrad_path::gemm
  conv_plan() = default;
  ~conv_plan();
  conv_plan(const conv_plan&) = delete;
  conv_plan& operator=(const conv_plan&) = delete;
};

/// Device bytes held by a backend's allocations, now and at most. Shared
/// with the deleters of the tensors it allocated, which may outlive it.
struct held_bytes {
  std::atomic<std::size_t> now{0}, peak{0};
  void add(std::size_t n);
  void sub(std::size_t n) { now.fetch_sub(n); }
};

class cuda_backend final : public backend {
public:
  explicit cuda_backend(int index);
  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  device dev() const override { return device::cuda(index_); }

  std::shared_ptr<storage> allocate(std::size_t bytes) override;
  void copy_bytes(void* dst, device dst_dev, const void* src, device src_dev,
                  std::size_t bytes) override;
  void fill(float* x, std::size_t n, float value) override;
  void synchronize() override;
  std::size_t peak_bytes() const override { return held_->peak.load(); }
  void reset_peak_bytes() override { held_->peak.store(held_->now.load()); }

  void set_gemm_math(gemm_math m) override { math_.store(m); }
  gemm_math current_gemm_math() const override { return math_.load(); }
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override;
  void bias_add_rows(float* y, const float* bias, int rows, int cols) override;
  void bias_grad_rows(const float* dy, float* dbias, int rows, int cols) override;
  void bias_add_nchw(float* y, const float* bias, int n, int c, int hw) override;
  void bias_grad_nchw(const float* dy, float* dbias, int n, int c, int hw) override;

  void relu_forward(const float* x, float* y, std::size_t n) override;
  void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) override;
  void axpy(std::size_t n, float a, const float* x, float* y) override;
  void scale(std::size_t n, float a, float* x) override;
  void add(std::size_t n, const float* x0, const float* x1, float* y, float s = 1.f) override;
  double sum(const float* x, std::size_t n) override;
  double sum_squares(const float* x, std::size_t n) override;

  std::size_t conv2d_workspace_bytes(const conv_geom& g) override;
  void conv2d_forward(const conv_geom& g, const float* x, const float* w, float* y,
                      void* workspace) override;
  void conv2d_backward(const conv_geom& g, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, void* workspace) override;
  void maxpool_forward(const pool_geom& g, const float* x, float* y,
                       std::int32_t* argmax) override;
  void maxpool_backward(const pool_geom& g, const float* dy, const std::int32_t* argmax,
                        float* dx) override;
  void avgpool_global_forward(const float* x, float* y, int n, int c, int hw) override;
  void avgpool_global_backward(const float* dy, float* dx, int n, int c, int hw) override;

  void batchnorm_forward_train(const float* x, float* y, int n, int c, int hw,
                               const float* gamma, const float* beta, float* save_mean,
                               float* save_invstd, float* running_mean, float* running_var,
                               float momentum, float eps, bool relu = false) override;
  void batchnorm_forward_eval(const float* x, float* y, int n, int c, int hw, const float* gamma,
                              const float* beta, const float* running_mean,
                              const float* running_var, float eps, bool relu = false) override;
  void batchnorm_backward(const float* x, const float* dy, float* dx, int n, int c, int hw,
                          const float* gamma, const float* save_mean, const float* save_invstd,
                          float* dgamma, float* dbeta, const float* relu_y = nullptr) override;

  void layernorm_forward(const float* x, float* y, float* mean, float* rstd, const float* w, const float* b,
                         int rows, int cols, float eps) override;
  void layernorm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* w,
                          float* dx, float* dw, float* db, int rows, int cols) override;
  void dropout(float* x, int rows, int cols, float p, std::uint64_t key, std::int64_t first_row) override;
  void gelu_forward(const float* x, float* y, std::size_t n) override;
  void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n) override;
  void embedding_forward(const float* tokens, const float* wte, const float* wpe, float* h, int batch, int time,
                         int d, int vocab) override;
  void embedding_backward(const float* tokens, const float* dh, float* dwte, float* dwpe, int batch, int time,
                          int d, int vocab) override;
  void attention_forward(const float* qkv, float* y, float* lse, int batch, int time, int heads, int d,
                         const attention_dropout& drop) override;
  void attention_backward(const float* qkv, const float* y, const float* dy, const float* lse, float* dqkv,
                          int batch, int time, int heads, int d, const attention_dropout& drop) override;

  xent_result softmax_xent(const float* logits, const std::int32_t* labels, int n, int classes,
                           float* dlogits, float grad_scale) override;

  void sgd_update(std::size_t n, float lr, float momentum, float weight_decay, bool nesterov,
                  float* w, const float* g, float* v) override;
  void adam_update(std::size_t n, float lr, float beta1, float beta2, float eps,
                   float weight_decay, std::int64_t step, float* w, const float* g, float* m,
                   float* v) override;

  cudaStream_t stream() const { return stream_; }

private:
  /// Device scratch of at least `bytes` (grown on demand, kept); the caller
  /// holds host_mu_ until it is done with it.
  void* scratch(std::size_t bytes);
  /// The plan for `g`, made on first use; takes host_mu_ (call it unlocked).
  const conv_plan& plan_for(const conv_geom& g);
  /// The plan's weight-gradient path: GRADWIRE_CUDA_WGRAD's, or the
  /// fastest of cuDNN's (`cudnn_ms`), the GEMMs and the direct kernel,
  /// timed here; host_mu_ held.
  void choose_wgrad(conv_plan& p, const conv_geom& g, float cudnn_ms);
  /// dw += the weight gradient of `g` through GEMMs (wgrad.cu); host_mu_ held.
  void wgrad_gemm(const conv_geom& g, const wgrad_shape& ws, const float* x, const float* dy,
                  float* dw);
  /// dw += the weight gradient of `g` computed directly (wgrad_direct.cu);
  /// only where wgrad_direct_fits(g); host_mu_ held.
  void wgrad_direct(const conv_geom& g, const float* x, const float* dy, float* dw);
  /// sum of x (squared: of x * x) in double: fixed blocks' partial sums,
  /// added in order; host_mu_ taken here.
  double reduce(const float* x, std::size_t n, bool squared);
  /// dw[j] += the sum of part[i][j] over i < count, in order of i.
  void add_partials(const float* part, int count, std::size_t len, float* dw);
  /// The best of three timed runs, ms, of wgrad_gemm shaped by `ws` or,
  /// when null, wgrad_direct (infinite where it cannot run); host_mu_ held.
  float time_wgrad(const conv_geom& g, const wgrad_shape* ws);

  int index_;
  std::atomic<gemm_math> math_{gemm_math::fp32};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  std::mutex host_mu_; ///< cuDNN calls, scratch_ and its read-backs, plans_
  std::map<std::array<int, 9>, std::unique_ptr<conv_plan>> plans_;
  op_timer timer_; ///< GRADWIRE_CUDA_PROFILE=1: GPU time per operation
  std::shared_ptr<held_bytes> held_ = std::make_shared<held_bytes>();
};

} // namespace gradwire::kernels
