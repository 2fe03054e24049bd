#include "models/network.hpp"

#include "kernels/error.hpp"
#include "models/layers/gpt.hpp"
#include "models/layers/layers.hpp"
#include "models/torch_layer.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace gradwire::models {

const std::vector<std::string>& model_kinds() {
  static const std::vector<std::string> kinds = {"mlp", "lenet5", "resnet20", "resnet32",
                                                 "resnet44", "resnet56", "gpt", "torch"};
  return kinds;
}

network::network(std::vector<std::unique_ptr<layer>> layers) : layers_(std::move(layers)) {
  // linear + relu: the linear applies max(0, .) on its own output blocks
  // (in the threads that computed them), the relu passes it through;
  // batchnorm2d + relu: one pass each way instead of two.
  fuse_activations(layers_);
}

void network::describe(std::vector<param_spec>& params, std::vector<param_spec>& state) const {
  for (std::size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->describe(params, state, std::to_string(i) + "." + layers_[i]->name() + ".");
}

namespace {
std::atomic<bool> g_blocked{[] {
  const char* v = std::getenv("GRADWIRE_ACTIVATIONS");
  return v == nullptr || std::strcmp(v, "nchw") != 0;
}()};
} // namespace

void set_blocked_activations(bool on) { g_blocked = on; }
bool blocked_activations() { return g_blocked.load(); }

void network::bind(param_binder& b) {
  offsets_.clear();
  for (auto& l : layers_) {
    offsets_.push_back(b.position());
    l->bind(b);
  }
  b.finish();
  be_ = &b.be();
  const int block = blocked_activations() ? be_->activation_block() : 0;
  layout_.clear();
  int cur = 0;
  for (auto& l : layers_)
    layout_.push_back(cur = l->plan_layout(cur, block));
  moved_.assign(layers_.size() + 1, tensor());
  moved_grad_.assign(layers_.size() + 1, tensor());
  move_buf_.assign(layers_.size() + 1, scratch());
  move_grad_buf_.assign(layers_.size() + 1, scratch());
  zero_whole_ = b.grads_zeroed_whole() ? b.grad_buffer() : tensor();
  first_trainable_ = layers_.size();
  for (std::size_t i = 0; i < layers_.size() && first_trainable_ == layers_.size(); ++i) {
    std::vector<param_spec> p, s;
    layers_[i]->describe(p, s, "");
    if (!p.empty())
      first_trainable_ = i;
  }
}

const tensor& network::move(const tensor& x, int from, int to, tensor& out, scratch& buf) {
  check(x.rank() == 4, "network: an activation of shape " + kernels::to_string(x.shape()) +
                         " cannot change layout (NCHW expected)");
  out = buf.get(x.shape(), x.dev());
  be_->relayout(x.data(), out.data(), static_cast<int>(x.dim(0)), static_cast<int>(x.dim(1)),
                static_cast<int>(x.dim(2) * x.dim(3)), from > 0 ? from : to, to > 0);
  return out;
}

void network::set_dropout_stream(std::uint64_t key, std::int64_t first_sample) {
  for (auto& l : layers_)
    l->set_dropout_stream(key, first_sample);
}

const tensor& network::forward(const tensor& x, bool train) {
  const tensor* h = &x;
  int cur = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (train) // (an evaluation, after a stop too, runs to its end)
      check_abort();
    if (layout_[i] != cur)
      h = &move(*h, cur, layout_[i], moved_[i], move_buf_[i]);
    h = &layers_[i]->forward(*h, train);
    cur = layout_[i];
  }
  if (cur != 0)
    h = &move(*h, cur, 0, moved_.back(), move_buf_.back());
  return *h;
}

kernels::xent_result network::loss(const tensor& logits, const std::int32_t* labels, float* dlogits, float scale) {
  if (!layers_.empty() && layers_.back()->has_loss())
    return layers_.back()->loss(labels, scale, dlogits);
  return kernels::backend_for(logits.dev()).softmax_xent(logits.data(), labels, static_cast<int>(logits.dim(0)),
                                                         static_cast<int>(logits.dim(1)), dlogits, scale);
}

tensor network::backward(const tensor& dlogits, bool input_grad,
                         const std::function<void(std::size_t)>* ready) {
  if (zero_whole_.defined())
    kernels::backend_for(zero_whole_.dev()).fill(zero_whole_.data(), static_cast<std::size_t>(zero_whole_.numel()), 0.f);
  const tensor* g = &dlogits;
  const std::size_t stop = input_grad ? 0 : first_trainable_;
  int cur = 0; // the layout of g
  for (std::size_t i = layers_.size(); i-- > stop;) {
    check_abort();
    if (layout_[i] != cur)
      g = &move(*g, cur, layout_[i], moved_grad_[i + 1], move_grad_buf_[i + 1]);
    g = &layers_[i]->backward(*g, input_grad || i > stop);
    cur = layout_[i];
    if (ready != nullptr && *ready)
      (*ready)(i == stop ? 0 : offsets_[i]);
  }
  if (ready != nullptr && *ready && stop == layers_.size())
    (*ready)(0);
  if (input_grad && cur != 0)
    g = &move(*g, cur, 0, moved_grad_[0], move_grad_buf_[0]);
  return input_grad ? *g : tensor();
}

shape_t network::output_shape(const shape_t& in) const {
  shape_t s = in;
  for (const auto& l : layers_)
    s = l->output_shape(s);
  return s;
}

double network::forward_flops(const shape_t& sample) const {
  shape_t s = {1};
  s.insert(s.end(), sample.begin(), sample.end());
  double f = 0;
  for (const auto& l : layers_) {
    f += l->forward_flops(s);
    s = l->output_shape(s);
  }
  return f;
}

double network::train_flops(const shape_t& sample) const {
  // Each GEMM-like layer costs its forward FLOPs again for the weight
  // gradient and again for the input gradient; the first trainable layer
  // skips the latter (see backward()).
  shape_t s = {1};
  s.insert(s.end(), sample.begin(), sample.end());
  double f = 0;
  bool first = true;
  for (const auto& l : layers_) {
    const double fwd = l->forward_flops(s);
    f += l->train_flops(s, first && fwd > 0);
    first = first && fwd == 0;
    s = l->output_shape(s);
  }
  return f;
}

namespace {

using layers_t = std::vector<std::unique_ptr<layer>>;

layers_t build_mlp(const model_spec& s) {
  layers_t l;
  l.push_back(std::make_unique<flatten>());
  int in = s.channels * s.height * s.width;
  for (int h : s.hidden) {
    check(h > 0, "model.hidden: widths must be positive, got " + std::to_string(h));
    l.push_back(std::make_unique<linear>(in, h));
    l.push_back(std::make_unique<relu>());
    in = h;
  }
  l.push_back(std::make_unique<linear>(in, s.classes));
  return l;
}

// LeNet-5 with ReLU and max-pooling. 28x28 inputs are padded by 2 so both
// 28x28 (MNIST) and 32x32 (CIFAR) reach 16 x 5 x 5 before the classifier.
// Pooling comes before the ReLU: max and ReLU commute (ReLU is monotonic),
// so outputs and gradients equal conv-ReLU-pool, with a quarter of the ReLU work.
layers_t build_lenet5(const model_spec& s) {
  check((s.height == 28 && s.width == 28) || (s.height == 32 && s.width == 32),
        "model.kind = \"lenet5\" needs 28x28 or 32x32 images, the dataset has " +
          std::to_string(s.height) + "x" + std::to_string(s.width));
  const int pad = s.height == 28 ? 2 : 0;
  layers_t l;
  l.push_back(std::make_unique<conv2d>(s.channels, 6, 5, 1, pad, true));
  l.push_back(std::make_unique<maxpool2d>(2, 2));
  l.push_back(std::make_unique<relu>());
  l.push_back(std::make_unique<conv2d>(6, 16, 5, 1, 0, true));
  l.push_back(std::make_unique<maxpool2d>(2, 2));
  l.push_back(std::make_unique<relu>());
  l.push_back(std::make_unique<flatten>());
  l.push_back(std::make_unique<linear>(16 * 5 * 5, 120));
  l.push_back(std::make_unique<relu>());
  l.push_back(std::make_unique<linear>(120, 84));
  l.push_back(std::make_unique<relu>());
  l.push_back(std::make_unique<linear>(84, s.classes));
  return l;
}

// ResNet for 32x32 inputs (He et al. 2016, section 4.2): a 3x3 conv to 16
// channels, three stages of n basic blocks at 16/32/64 channels (stride 2
// between stages), global average pooling and a linear classifier.
// Depth = 6n + 2: resnet20 has n = 3.
layers_t build_resnet(const model_spec& s, int depth) {
  const int n = (depth - 2) / 6;
  layers_t l;
  l.push_back(std::make_unique<conv2d>(s.channels, 16, 3, 1, 1, false));
  l.push_back(std::make_unique<batchnorm2d>(16));
  l.push_back(std::make_unique<relu>());
  int in = 16;
  for (int stage = 0; stage < 3; ++stage) {
    const int out = 16 << stage;
    for (int b = 0; b < n; ++b) {
      l.push_back(std::make_unique<residual_block>(in, out, (stage > 0 && b == 0) ? 2 : 1));
      in = out;
    }
  }
  l.push_back(std::make_unique<global_avgpool>());
  l.push_back(std::make_unique<linear>(64, s.classes));
  return l;
}

} // namespace

network make_network(const model_spec& spec) {
  check(spec.channels > 0 && spec.height > 0 && spec.width > 0 && spec.classes > 1,
        "model input must have positive shape and at least 2 classes");
  if (spec.kind == "mlp")
    return network(build_mlp(spec));
  if (spec.kind == "lenet5")
    return network(build_lenet5(spec));
  if (spec.kind == "torch") {
    std::vector<std::unique_ptr<layer>> l;
    l.push_back(make_torch_layer(spec));
    return network(std::move(l));
  }
  if (spec.kind == "gpt") {
    std::vector<std::unique_ptr<layer>> l;
    l.push_back(std::make_unique<gpt>(gpt_shape{spec.layers, spec.heads, spec.d_model, spec.context, spec.vocab, spec.dropout}));
    return network(std::move(l));
  }
  for (int depth : {20, 32, 44, 56})
    if (spec.kind == "resnet" + std::to_string(depth))
      return network(build_resnet(spec, depth));
  std::string known;
  for (const auto& k : model_kinds())
    known += (known.empty() ? "" : ", ") + k;
  throw error("unknown model kind '" + spec.kind + "' (known: " + known + ")");
}

} // namespace gradwire::models
