#pragma once
/// @file layer.hpp
/// The layer interface. A layer owns no parameter memory: the model keeps
/// all parameters in one contiguous buffer and all gradients in another of
/// the same layout (llm.c's malloc_and_point_parameters), and each layer is
/// bound to typed views into them. Several replicas of a network (one per
/// thread of a worker) bind to the same parameters and their own gradients.
///
/// Contract: forward caches what backward needs; backward *overwrites* the
/// layer's parameter gradients (each parameter is used once per forward)
/// and returns dL/dx, or an undefined tensor when need_dx is false.

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"
#include "kernels/thread_pool.hpp"

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace gradwire::models {

using kernels::shape_t;
using kernels::tensor;

/// How a parameter or state tensor starts out.
enum class init_kind {
  uniform_fan_in, ///< U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's Linear/Conv default
  ones,
  zeros,
  normal, ///< N(0, stddev^2): GPT-2's initialisation
  from_layer, ///< param_spec::fill gives the values (a torch module's own initialisation)
};

struct param_spec {
  std::string name;
  shape_t shape;
  init_kind init = init_kind::zeros;
  std::int64_t fan_in = 1;
  float stddev = 0.f; ///< init_kind::normal
  /// AdamW decays it (weight matrices); biases, norms and embeddings are
  /// left alone, as nanoGPT's and most transformer recipes do.
  bool decay = false;
  /// init_kind::from_layer: writes the tensor's initial values for a seed.
  std::function<void(std::uint64_t seed, float* out)> fill = nullptr;
};

/// Hands out consecutive views of the model's parameter, gradient and state
/// buffers, in the order the layers described them.
class param_binder {
public:
  struct bound {
    tensor value;
    tensor grad;
  };
  param_binder(const std::vector<param_spec>& params, const std::vector<std::size_t>& param_offsets,
               const std::vector<param_spec>& state, const std::vector<std::size_t>& state_offsets,
               tensor param_buf, tensor grad_buf, tensor state_buf, bool owns_state,
               kernels::thread_pool* pool = nullptr);

  bound param(const std::string& name, const shape_t& shape);
  /// A state view (BN running stats). Every replica may read it; only the
  /// one that owns_state() updates it, so threads never race on it.
  tensor state(const std::string& name, const shape_t& shape);
  bool owns_state() const { return owns_state_; }
  /// Buffer offset of the next parameter to bind (the buffer size after the last).
  std::size_t position() const;
  /// Threads a layer may split its own work over (null: run serially).
  kernels::thread_pool* pool() const { return pool_; }
  kernels::backend& be() const;
  void finish() const;
  /// The gradient buffer the parameters' gradients are views of.
  const tensor& grad_buffer() const { return grad_buf_; }
  /// Whether the network zeroes that whole buffer itself before each
  /// backward pass (one fill), so its layers must not zero their own
  /// gradients first: on a GPU, where each of a ResNet's 64 small fills
  /// would be a kernel launch of its own (bench/RESULTS.md, "Figures behind the code").
  /// On the CPU each layer zeroes what it needs, where it is about to be
  /// written (a linear layer's weight gradient needs none: its GEMM sets it).
  bool grads_zeroed_whole() const;
  /// Tests: zero whole buffers on every device, or on none (automatic: on
  /// GPUs only), for networks bound after the call.
  enum class zeroing { automatic, whole, per_layer };
  static void set_zeroing(zeroing z);

private:
  const std::vector<param_spec>& params_;
  const std::vector<std::size_t>& param_offsets_;
  const std::vector<param_spec>& state_;
  const std::vector<std::size_t>& state_offsets_;
  tensor param_buf_, grad_buf_, state_buf_;
  bool owns_state_;
  kernels::thread_pool* pool_;
  std::size_t next_param_ = 0, next_state_ = 0;
};

/// A tensor of varying leading size backed by storage that only grows.
class scratch {
public:
  tensor get(const shape_t& shape, kernels::device dev, kernels::dtype dt = kernels::dtype::f32);

private:
  tensor buf_;
};

/// Thrown by a network's forward or backward when the flag given to
/// abort_on() was raised between two layers (or two blocks of a layer that
/// has them): the step is abandoned before any parameter changed (the
/// optimizer runs after the whole backward).
struct step_aborted : std::exception {
  const char* what() const noexcept override { return "the step was stopped between two layers"; }
};

class layer {
public:
  virtual ~layer() = default;
  virtual std::string name() const = 0;
  /// Shape of the output for an input of shape `in` (batch dimension first).
  virtual shape_t output_shape(const shape_t& in) const = 0;
  /// Appends this layer's trainable parameters and its state tensors.
  virtual void describe(std::vector<param_spec>& params, std::vector<param_spec>& state,
                        const std::string& prefix) const {
    (void)params, (void)state, (void)prefix;
  }
  /// Takes views for every described tensor, in the same order.
  virtual void bind(param_binder& b) {
    be_ = &b.be();
    pool_ = b.pool();
    grads_zeroed_ = b.grads_zeroed_whole();
  }
  virtual const tensor& forward(const tensor& x, bool train) = 0;
  virtual const tensor& backward(const tensor& dy, bool need_dx) = 0;
  /// A layer of many blocks (the GPT's) looks at `*flag` between them too,
  /// in a training forward and in backward (network::abort_on).
  virtual void abort_on(const std::atomic<bool>* flag) { (void)flag; }
  /// Whether this layer, the network's last, computes the loss of its own
  /// output (a torch module's loss(output, target)); otherwise the loss is
  /// softmax cross-entropy on its logits.
  virtual bool has_loss() const { return false; }
  /// The loss of the last forward's output against `labels` (one class
  /// index per output row), as softmax_xent gives it: the sum over rows
  /// and the correct argmax predictions; with `d_out`, also writes
  /// `scale` x d(row losses' sum)/d(output) there.
  virtual kernels::xent_result loss(const std::int32_t* labels, float scale, float* d_out) {
    (void)labels, (void)scale, (void)d_out;
    return {};
  }
  /// The next training forward's dropout masks: `key` for the step, its
  /// input's first sample `first_sample` of the step's batch (a layer
  /// without dropout ignores it).
  virtual void set_dropout_stream(std::uint64_t key, std::int64_t first_sample) { (void)key, (void)first_sample; }
  /// Floating-point operations of one forward pass for one sample of shape `in`.
  virtual double forward_flops(const shape_t& in) const { (void)in; return 0; }
  /// FLOPs of forward and backward: the forward's again for the weight
  /// gradient and again for the input gradient, which the first trainable
  /// layer skips (network::backward).
  virtual double train_flops(const shape_t& in, bool first) const { return forward_flops(in) * (first ? 2 : 3); }
  /// Plans the layout of the activations this layer runs on, once bound:
  /// 0 for NCHW, B for channels in blocks of B ([n][c/B][h][w][B], see
  /// backend::activation_block). `in` is the layout of the input offered,
  /// `block` the backend's block (0: none). Returns the layout the layer
  /// takes and gives (the network moves activations between layouts where
  /// neighbours differ). By default NCHW.
  virtual int plan_layout(int in, int block) {
    (void)in, (void)block;
    return 0;
  }

protected:
  kernels::backend& be() const { return *be_; }
  kernels::backend* be_ = nullptr;
  kernels::thread_pool* pool_ = nullptr;
  /// The network zeroed every gradient before this backward pass
  /// (param_binder::grads_zeroed_whole): dw += dW needs no fill first.
  bool grads_zeroed_ = false;
};

} // namespace gradwire::models
