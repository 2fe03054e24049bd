#pragma once
/// @file backend.hpp
/// The kernel interface every device implements. Layers hold a backend
/// reference and call these with raw device pointers (llm.c style); the CPU
/// implementation is the reference every other backend is tested against.
///
/// Layout conventions: matrices are row-major; images are NCHW; a convolution
/// weight is [K, C, R, S]; a linear weight is [out, in].

#include "kernels/device.hpp"
#include "kernels/error.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gradwire::kernels {

/// Geometry of a 2-D convolution (square stride and padding).
struct conv_geom {
  int n = 0, c = 0, h = 0, w = 0; ///< input batch, channels, height, width
  int k = 0, r = 0, s = 0;         ///< output channels, kernel height, width
  int stride = 1, pad = 0;
  /// Activations (x, y and their gradients) in channel blocks of `block`,
  /// [n][c/block][h][w][block] (oneDNN's nChw8c / nChw16c), when > 0;
  /// NCHW when 0. Weights are OIHW either way.
  int block = 0;
  int out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int out_w() const { return (w + 2 * pad - s) / stride + 1; }
};

/// Geometry of a max-pooling window (square window and stride, no padding).
struct pool_geom {
  int n = 0, c = 0, h = 0, w = 0;
  int size = 2, stride = 2;
  int out_h() const { return (h - size) / stride + 1; }
  int out_w() const { return (w - size) / stride + 1; }
};

/// Sum of per-sample losses and number of correct argmax predictions.
struct xent_result {
  double loss_sum = 0;
  std::int64_t correct = 0;
};

/// What a backend's GEMMs and attention compute in (train.precision):
/// fp32, or bf16 on a GPU's Tensor Cores, where the inputs are rounded to
/// bfloat16 and the products summed in fp32; operands and results stay
/// fp32 in memory, so master weights and optimizer state are fp32 either
/// way.
enum class gemm_math { fp32, bf16 };

/// Dropout of attention's probabilities (model.dropout), with the mask of
/// kernels/dropout_mask.hpp (attention_index): each probability dropped
/// with probability p (0: none) under `key`, the rest scaled by
/// 1 / (1 - p). Sample b of a call is sample first_sample + b of the step's
/// batch, so a batch split over calls draws the whole batch's mask.
struct attention_dropout {
  float p = 0.f;
  std::uint64_t key = 0;
  std::int64_t first_sample = 0;
};

/// Throws gradwire::error naming `what` unless dropout's probability p is
/// in [0, 1) (1 would drop everything and scale by infinity).
inline void check_dropout(float p, const char* what) {
  GW_CHECK(p >= 0.f && p < 1.f, std::string(what) + ": dropout probability " + std::to_string(p) + " is not in [0, 1)");
}

class backend {
public:
  virtual ~backend() = default;
  virtual device dev() const = 0;

  // --- memory -------------------------------------------------------------
  virtual std::shared_ptr<storage> allocate(std::size_t bytes) = 0;
  /// Copies `bytes` between two pointers, at least one of them on this device.
  virtual void copy_bytes(void* dst, device dst_dev, const void* src, device src_dev,
                          std::size_t bytes) = 0;
  virtual void fill(float* x, std::size_t n, float value) = 0;
  /// Waits until every kernel issued so far has finished.
  virtual void synchronize() = 0;
  /// The most device memory this backend's allocations (tensors and its
  /// own scratch) held at once since the last reset_peak_bytes(), in
  /// bytes; 0 where it is not tracked (the CPU).
  virtual std::size_t peak_bytes() const { return 0; }
  /// Starts the peak over from what is held now.
  virtual void reset_peak_bytes() {}

  // --- dense algebra ----------------------------------------------------------
  /// How later gemm and attention calls compute. Throws gradwire::error
  /// where this device cannot (bf16 on the CPU).
  virtual void set_gemm_math(gemm_math m);
  virtual gemm_math current_gemm_math() const { return gemm_math::fp32; }
  /// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, row-major.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta,
                    float* c, int ldc) = 0;
  /// y[r, c] += bias[c] for r < rows.
  virtual void bias_add_rows(float* y, const float* bias, int rows, int cols) = 0;
  /// dbias[c] += sum_r dy[r, c].
  virtual void bias_grad_rows(const float* dy, float* dbias, int rows, int cols) = 0;
  /// y[n, c, i] += bias[c] (NCHW with hw = H*W).
  virtual void bias_add_nchw(float* y, const float* bias, int n, int c, int hw) = 0;
  /// dbias[c] += sum_{n,i} dy[n, c, i].
  virtual void bias_grad_nchw(const float* dy, float* dbias, int n, int c, int hw) = 0;

  // --- elementwise and reductions ------------------------------------------
  virtual void relu_forward(const float* x, float* y, std::size_t n) = 0;
  /// dx = dy where y > 0, else 0 (y is the forward output).
  virtual void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) = 0;
  /// y += a * x
  virtual void axpy(std::size_t n, float a, const float* x, float* y) = 0;
  /// x *= a
  virtual void scale(std::size_t n, float a, float* x) = 0;
  /// y = (x0 + x1) * s (may alias)
  virtual void add(std::size_t n, const float* x0, const float* x1, float* y, float s = 1.f) = 0;
  /// sum of x, in double, in an order fixed by n: a run repeats itself
  virtual double sum(const float* x, std::size_t n) = 0;
  /// sum of x * x, likewise (the global norm that clipping reads)
  virtual double sum_squares(const float* x, std::size_t n) = 0;

  // --- convolution and pooling ---------------------------------------------
  /// Bytes of scratch memory conv2d_forward/backward need for `g`.
  virtual std::size_t conv2d_workspace_bytes(const conv_geom& g) = 0;
  /// y[n,k,oh,ow] = conv(x, w) (no bias).
  virtual void conv2d_forward(const conv_geom& g, const float* x, const float* w, float* y,
                              void* workspace) = 0;
  /// dw += dW; dx = dX when dx is not null. `workspace` must be the one the
  /// forward pass of the same x used, unchanged since (a backend may keep
  /// forward intermediates in it).
  virtual void conv2d_backward(const conv_geom& g, const float* x, const float* w,
                               const float* dy, float* dx, float* dw, void* workspace) = 0;
  virtual void maxpool_forward(const pool_geom& g, const float* x, float* y,
                               std::int32_t* argmax) = 0;
  virtual void maxpool_backward(const pool_geom& g, const float* dy, const std::int32_t* argmax,
                                float* dx) = 0;
  /// y[n, c] = mean_i x[n, c, i]
  virtual void avgpool_global_forward(const float* x, float* y, int n, int c, int hw) = 0;
  virtual void avgpool_global_backward(const float* dy, float* dx, int n, int c, int hw) = 0;

  // --- batch normalisation (per channel over N, H, W) -----------------------
  /// Training mode: normalises with batch statistics, saves mean and inverse
  /// std for backward, and updates running stats when they are not null.
  /// With `relu`, y is max(0, .) of the normalised value, in the same pass
  /// (the same bits as relu_forward after it).
  virtual void batchnorm_forward_train(const float* x, float* y, int n, int c, int hw,
                                       const float* gamma, const float* beta, float* save_mean,
                                       float* save_invstd, float* running_mean,
                                       float* running_var, float momentum, float eps, bool relu = false) = 0;
  virtual void batchnorm_forward_eval(const float* x, float* y, int n, int c, int hw,
                                      const float* gamma, const float* beta,
                                      const float* running_mean, const float* running_var,
                                      float eps, bool relu = false) = 0;
  /// dgamma, dbeta accumulate; dx is overwritten. With `relu_y` (the output
  /// of a forward with relu), dy counts only where relu_y > 0: the backward
  /// of relu(batchnorm(x)), the same bits as relu_backward before it.
  virtual void batchnorm_backward(const float* x, const float* dy, float* dx, int n, int c,
                                  int hw, const float* gamma, const float* save_mean,
                                  const float* save_invstd, float* dgamma, float* dbeta,
                                  const float* relu_y = nullptr) = 0;

  // --- blocked activations ---------------------------------------------------
  // A network keeps activations in channel blocks, [n][c/B][h*w][B], between
  // layers that all take them (a ResNet's stages on oneDNN's convolutions),
  // instead of moving them to NCHW and back around every convolution. A
  // backend without them says 0 and is never asked for the rest.
  /// The block this backend's convolutions run on natively; 0: NCHW only.
  virtual int activation_block() const { return 0; }
  /// Whether a convolution from `c` to `k` channels takes activations in
  /// blocks of `block` natively (conv_geom::block).
  virtual bool conv_takes_block(int c, int k, int block) const {
    (void)c, (void)k, (void)block;
    return false;
  }
  /// NCHW -> blocked (`to_blocked`) or back; c a multiple of `block`.
  virtual void relayout(const float* from, float* to, int n, int c, int hw, int block, bool to_blocked);
  /// The batch-normalisation passes above on blocked activations.
  virtual void batchnorm_forward_train_blocked(const float* x, float* y, int n, int c, int hw, int block,
                                               const float* gamma, const float* beta, float* save_mean,
                                               float* save_invstd, float* running_mean, float* running_var,
                                               float momentum, float eps, bool relu);
  virtual void batchnorm_forward_eval_blocked(const float* x, float* y, int n, int c, int hw, int block,
                                              const float* gamma, const float* beta, const float* running_mean,
                                              const float* running_var, float eps, bool relu);
  virtual void batchnorm_backward_blocked(const float* x, const float* dy, float* dx, int n, int c, int hw,
                                          int block, const float* gamma, const float* save_mean,
                                          const float* save_invstd, float* dgamma, float* dbeta,
                                          const float* relu_y);

  // --- transformer ----------------------------------------------------------
  // A decoder-only transformer's kernels besides the GEMMs. Activations are
  // [rows, cols] row-major with rows = batch * time. A backend without them
  // says so when asked (backend_transformer.cpp); the CPU backend has them all.
  /// LayerNorm over each row (biased variance, as PyTorch):
  /// y = (x - mean) * rstd * w + b; saves mean and rstd per row for backward.
  virtual void layernorm_forward(const float* x, float* y, float* mean, float* rstd, const float* w,
                                 const float* b, int rows, int cols, float eps);
  /// dx is overwritten; dw and db accumulate.
  virtual void layernorm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                                  const float* w, float* dx, float* dw, float* db, int rows, int cols);
  /// Exact GELU: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
  virtual void gelu_forward(const float* x, float* y, std::size_t n);
  /// dx = dy * GELU'(x) (x is the forward input; dx may alias dy).
  virtual void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n);
  /// h[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] for b < batch, t < time.
  /// Tokens are floats holding integers; one outside [0, vocab) throws
  /// gradwire::error naming it.
  virtual void embedding_forward(const float* tokens, const float* wte, const float* wpe, float* h, int batch,
                                 int time, int d, int vocab);
  /// dwte[tokens[b, t]] += dh[b, t] and dwpe[t] += dh[b, t] (accumulate);
  /// the tokens were checked against `vocab` by the forward pass.
  virtual void embedding_backward(const float* tokens, const float* dh, float* dwte, float* dwpe, int batch,
                                  int time, int d, int vocab);
  /// Dropout of x [rows, cols] in place (kernels/dropout_mask.hpp): element
  /// (row, col) is element (first_row + row) x cols + col of the mask under
  /// `key`; kept values are scaled by 1 / (1 - p). The same call on a
  /// gradient applies the same mask (backward).
  virtual void dropout(float* x, int rows, int cols, float p, std::uint64_t key, std::int64_t first_row);
  /// Causal multi-head self-attention. qkv is [batch, time, 3d]: q, k and v
  /// side by side, each `heads` heads of d / heads (nanoGPT's c_attn
  /// output). y [batch, time, d] = dropout(softmax(q k^T / sqrt(d / heads),
  /// causal)) v per head; lse [batch, heads, time] keeps each row's
  /// log-sum-exp (of the probabilities before dropout) for backward. The
  /// time x time scores are never stored: keys are taken in tiles with an
  /// online softmax (FlashAttention), and the dropout mask is drawn again
  /// where it is needed.
  virtual void attention_forward(const float* qkv, float* y, float* lse, int batch, int time, int heads, int d,
                                 const attention_dropout& drop);
  /// dqkv [batch, time, 3d] is overwritten from dy, recomputing the scores
  /// from qkv and lse and the mask from `drop` (FlashAttention-2's backward).
  virtual void attention_backward(const float* qkv, const float* y, const float* dy, const float* lse,
                                  float* dqkv, int batch, int time, int heads, int d, const attention_dropout& drop);

  // --- loss -----------------------------------------------------------------
  /// Softmax cross-entropy over rows of `logits` [n, classes]. Writes
  /// dlogits = (softmax - onehot) * grad_scale when dlogits is not null.
  virtual xent_result softmax_xent(const float* logits, const std::int32_t* labels, int n,
                                   int classes, float* dlogits, float grad_scale) = 0;

  // --- optimizers (over one contiguous parameter buffer) --------------------
  /// PyTorch SGD: g' = g + wd*w; v = mu*v + g'; w -= lr * (nesterov ? g' + mu*v : v).
  virtual void sgd_update(std::size_t n, float lr, float momentum, float weight_decay,
                          bool nesterov, float* w, const float* g, float* v) = 0;
  /// PyTorch Adam (L2 weight decay added to the gradient), step counted from 1.
  virtual void adam_update(std::size_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, std::int64_t step, float* w, const float* g,
                           float* m, float* v) = 0;
};

/// The backend for `d`. The CPU backend always exists; a CUDA device needs a
/// build with CUDA and a visible GPU, or this throws gradwire::error saying which.
backend& backend_for(const device& d);

/// Number of visible CUDA devices (0 in a CPU-only build or without a GPU).
int cuda_device_count();

/// Whether this build contains the CUDA kernels.
bool built_with_cuda();

/// Why a CUDA build cannot use its kernels here (its module would not load),
/// or "" when it can, or when nothing has tried yet.
std::string cuda_unavailable();

} // namespace gradwire::kernels
