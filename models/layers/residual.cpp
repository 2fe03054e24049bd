#include "models/layers/layers.hpp"

#include "kernels/error.hpp"

namespace gradwire::models {

residual_block::residual_block(int in_ch, int out_ch, int stride) {
  main_.push_back(std::make_unique<conv2d>(in_ch, out_ch, 3, stride, 1, false));
  main_.push_back(std::make_unique<batchnorm2d>(out_ch));
  main_.push_back(std::make_unique<relu>());
  main_.push_back(std::make_unique<conv2d>(out_ch, out_ch, 3, 1, 1, false));
  main_.push_back(std::make_unique<batchnorm2d>(out_ch));
  if (stride != 1 || in_ch != out_ch) {
    shortcut_.push_back(std::make_unique<conv2d>(in_ch, out_ch, 1, stride, 0, false));
    shortcut_.push_back(std::make_unique<batchnorm2d>(out_ch));
  }
  fuse_activations(main_);
}

shape_t residual_block::output_shape(const shape_t& in) const {
  shape_t s = in;
  for (const auto& l : main_)
    s = l->output_shape(s);
  return s;
}

double residual_block::forward_flops(const shape_t& in) const {
  double f = 0;
  shape_t s = in;
  for (const auto& l : main_) {
    f += l->forward_flops(s);
    s = l->output_shape(s);
  }
  s = in;
  for (const auto& l : shortcut_) {
    f += l->forward_flops(s);
    s = l->output_shape(s);
  }
  return f;
}

void residual_block::describe(std::vector<param_spec>& p, std::vector<param_spec>& s,
                              const std::string& prefix) const {
  for (std::size_t i = 0; i < main_.size(); ++i)
    main_[i]->describe(p, s, prefix + "main." + std::to_string(i) + ".");
  for (std::size_t i = 0; i < shortcut_.size(); ++i)
    shortcut_[i]->describe(p, s, prefix + "shortcut." + std::to_string(i) + ".");
}

void residual_block::bind(param_binder& b) {
  layer::bind(b);
  for (auto& l : main_)
    l->bind(b);
  for (auto& l : shortcut_)
    l->bind(b);
  out_relu_.bind(b);
}

bool residual_block::plan_all(int layout) {
  bool all = true;
  for (auto& l : main_)
    all = l->plan_layout(layout, layout) == layout && all;
  for (auto& l : shortcut_)
    all = l->plan_layout(layout, layout) == layout && all;
  return out_relu_.plan_layout(layout, layout) == layout && all;
}

int residual_block::plan_layout(int, int block) {
  if (block > 0 && plan_all(block))
    return block;
  plan_all(0);
  return 0;
}

const tensor& residual_block::forward(const tensor& x, bool train) {
  const tensor* h = &x;
  for (auto& l : main_)
    h = &l->forward(*h, train);
  const tensor* sc = &x;
  for (auto& l : shortcut_)
    sc = &l->forward(*sc, train);
  sum_ = sum_buf_.get(h->shape(), x.dev());
  be().add(static_cast<std::size_t>(h->numel()), h->data(), sc->data(), sum_.data());
  return out_relu_.forward(sum_, train);
}

const tensor& residual_block::backward(const tensor& dy, bool need_dx) {
  const tensor& ds = out_relu_.backward(dy, true);
  const tensor* g = &ds;
  for (auto it = main_.rbegin(); it != main_.rend(); ++it)
    g = &(*it)->backward(*g, true);
  if (!need_dx) {
    // Shortcut parameters still need their gradients.
    const tensor* s = &ds;
    for (auto it = shortcut_.rbegin(); it != shortcut_.rend(); ++it)
      s = &(*it)->backward(*s, std::next(it) != shortcut_.rend());
    dx_ = tensor();
    return dx_;
  }
  dx_ = dx_buf_.get(g->shape(), dy.dev());
  const tensor* s = &ds;
  for (auto it = shortcut_.rbegin(); it != shortcut_.rend(); ++it)
    s = &(*it)->backward(*s, true);
  be().add(static_cast<std::size_t>(g->numel()), g->data(), s->data(), dx_.data());
  return dx_;
}

} // namespace gradwire::models
