#pragma once
/// @file cpu_backend.hpp
/// The CPU backend: OpenBLAS for GEMM, plain loops (written to vectorise) for
/// everything else. It is the reference implementation: each method is split
/// by topic over the .cpp files beside this header.

#include "kernels/backend.hpp"

namespace gradwire::kernels {

class cpu_backend final : public backend {
public:
  cpu_backend();
  device dev() const override { return device::cpu(); }

  std::shared_ptr<storage> allocate(std::size_t bytes) override;
  void copy_bytes(void* dst, device dst_dev, const void* src, device src_dev,
                  std::size_t bytes) override;
  void fill(float* x, std::size_t n, float value) override;
  void synchronize() override {}

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

  int activation_block() const override;
  bool conv_takes_block(int c, int k, int block) const override;
  void relayout(const float* from, float* to, int n, int c, int hw, int block, bool to_blocked) override;
  void batchnorm_forward_train_blocked(const float* x, float* y, int n, int c, int hw, int block, const float* gamma,
                                       const float* beta, float* save_mean, float* save_invstd, float* running_mean,
                                       float* running_var, float momentum, float eps, bool relu) override;
  void batchnorm_forward_eval_blocked(const float* x, float* y, int n, int c, int hw, int block, const float* gamma,
                                      const float* beta, const float* running_mean, const float* running_var,
                                      float eps, bool relu) override;
  void batchnorm_backward_blocked(const float* x, const float* dy, float* dx, int n, int c, int hw, int block,
                                  const float* gamma, const float* save_mean, const float* save_invstd, float* dgamma,
                                  float* dbeta, const float* relu_y) override;

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
};

} // namespace gradwire::kernels
