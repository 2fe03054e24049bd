#pragma once
/// @file network.hpp
/// A sequential network and the builders of the model families: MLP
/// (configurable widths), LeNet-5, ResNet-(6n+2) for 32x32 inputs, and a
/// GPT (models/layers/gpt.hpp).

#include "models/layer.hpp"

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gradwire::models {

/// What the model is; everything needed to build identical replicas.
struct model_spec {
  std::string kind = "mlp";          ///< "mlp" | "lenet5" | "resnet20" (or resnet32, resnet44, resnet56) | "gpt" | "torch"
  std::vector<int> hidden = {256, 128}; ///< MLP hidden widths
  /// gpt: blocks, attention heads, residual width, context and vocabulary
  /// (its input is [1, 1, context] token ids, its classes the vocabulary).
  int layers = 4, heads = 4, d_model = 128, context = 128, vocab = 256;
  float dropout = 0.f; ///< gpt: the probability of dropping an element of the embeddings, attention's probabilities and the residual branches
  int channels = 1, height = 28, width = 28;
  int classes = 10;
  /// torch: the module file (an absolute path), the run's resolved config
  /// handed to its model(cfg), and torch's intra-op threads.
  std::string module, config_toml;
  int torch_threads = 1;
  /// torch: where the module computes (train.device): "cpu", or "cuda[:N]"
  /// with the model's buffers in host memory (the exchange stages there).
  std::string torch_device = "cpu";
  /// torch on text or token ids: the input [N, 1, 1, context] reaches the
  /// module as int64 [N, context], its output [N, context, vocab] leaves as
  /// [N * context, vocab], the built-in GPT's logits.
  bool torch_tokens = false;
};

/// The model kinds `make_network` accepts.
const std::vector<std::string>& model_kinds();


class network {
public:
  explicit network(std::vector<std::unique_ptr<layer>> layers);

  /// Describes all parameters and state tensors in binding order.
  void describe(std::vector<param_spec>& params, std::vector<param_spec>& state) const;
  void bind(param_binder& b);
  /// Logits [N, classes] for x [N, C, H, W] (or [N, features]).
  const tensor& forward(const tensor& x, bool train);
  /// From now on a training forward and backward look at `*flag` between layers and
  /// throw step_aborted when it is set (a stop request that cannot wait
  /// for the step's end: a step of minutes). Null: never.
  void abort_on(const std::atomic<bool>* flag) {
    abort_ = flag;
    for (auto& l : layers_)
      l->abort_on(flag);
  }
  /// Every layer's dropout masks for the next training forward
  /// (layer::set_dropout_stream).
  void set_dropout_stream(std::uint64_t key, std::int64_t first_sample);
  /// The loss of the last forward's `logits` against `labels`: the last
  /// layer's own (layer::has_loss) or softmax cross-entropy; with
  /// `dlogits`, also `scale` x its gradient there.
  kernels::xent_result loss(const tensor& logits, const std::int32_t* labels, float* dlogits, float scale);
  /// Back-propagates dL/dlogits, writing every parameter gradient. Returns
  /// dL/dx when `input_grad` (otherwise an undefined tensor, and the layers
  /// below the first trainable one are skipped).
  /// `ready(from)`, when given, is called as backward goes down the layers:
  /// the gradients of buffer elements [from, end) are final (a bucket of
  /// them can start its allreduce while lower layers still run).
  tensor backward(const tensor& dlogits, bool input_grad = false,
                  const std::function<void(std::size_t)>* ready = nullptr);
  /// Forward FLOPs for one sample of shape `sample` (no batch dimension).
  double forward_flops(const shape_t& sample) const;
  /// FLOPs of one training step for one sample: forward, weight gradients,
  /// and input gradients of every layer above the first trainable one.
  double train_flops(const shape_t& sample) const;
  /// Output shape for input `in` (with batch dimension).
  shape_t output_shape(const shape_t& in) const;

  /// Each layer's activation layout as planned at bind (0: NCHW; B:
  /// channel blocks of B), for tests and `gradwire info`.
  const std::vector<int>& layouts() const { return layout_; }

private:
  /// `x` moved from layout `from` to `to` (one of them NCHW) into `out`.
  const tensor& move(const tensor& x, int from, int to, tensor& out, scratch& buf);

  void check_abort() const {
    if (abort_ != nullptr && abort_->load(std::memory_order_relaxed))
      throw step_aborted();
  }

  std::vector<std::unique_ptr<layer>> layers_;
  const std::atomic<bool>* abort_ = nullptr;
  kernels::backend* be_ = nullptr;
  /// Per layer: the layout it runs in; where it differs from the layer
  /// below's, forward moves the activation and backward its gradient
  /// (one more slot for the way back to NCHW at the top).
  std::vector<int> layout_;
  std::vector<tensor> moved_, moved_grad_;
  std::vector<scratch> move_buf_, move_grad_buf_;
  /// Backward stops here: layers before the first one with parameters need
  /// no gradient, and that layer needs none for its input.
  std::size_t first_trainable_ = 0;
  /// Offset in the parameter buffer of each layer's first parameter (the
  /// next layer's offset for a layer without parameters).
  std::vector<std::size_t> offsets_;
  /// The gradient buffer, when backward zeroes it whole in one call
  /// (param_binder::grads_zeroed_whole); undefined otherwise.
  tensor zero_whole_;
};

/// Whether networks bound after the call keep activations in the backend's
/// channel blocks where their layers can (on by default; the environment's
/// GRADWIRE_ACTIVATIONS=nchw starts with it off). Process-wide, for tests
/// and A/B runs.
void set_blocked_activations(bool on);
bool blocked_activations();

/// Builds a fresh (unbound) network for `spec`; throws gradwire::error for
/// an unknown kind or an input shape the kind cannot take.
network make_network(const model_spec& spec);

} // namespace gradwire::models
