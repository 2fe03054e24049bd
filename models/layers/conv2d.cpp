#include "models/layers/layers.hpp"

#include "kernels/error.hpp"

namespace gradwire::models {

kernels::conv_geom conv2d::geom(const shape_t& in) const {
  check(in.size() == 4 && in[1] == c_, "conv2d(" + std::to_string(c_) + " -> " +
                                         std::to_string(k_) + ") got input " +
                                         kernels::to_string(in));
  kernels::conv_geom g;
  g.n = static_cast<int>(in[0]);
  g.c = c_;
  g.h = static_cast<int>(in[2]);
  g.w = static_cast<int>(in[3]);
  g.k = k_;
  g.r = g.s = r_;
  g.stride = stride_;
  g.pad = pad_;
  g.block = block_;
  check(g.out_h() > 0 && g.out_w() > 0, "conv2d kernel " + std::to_string(r_) +
                                          " does not fit input " + kernels::to_string(in));
  return g;
}

shape_t conv2d::output_shape(const shape_t& in) const {
  auto g = geom(in);
  return {in[0], k_, g.out_h(), g.out_w()};
}

double conv2d::forward_flops(const shape_t& in) const {
  auto g = geom(in);
  return 2.0 * k_ * c_ * r_ * r_ * g.out_h() * g.out_w();
}

void conv2d::describe(std::vector<param_spec>& p, std::vector<param_spec>&,
                      const std::string& prefix) const {
  const std::int64_t fan_in = static_cast<std::int64_t>(c_) * r_ * r_;
  p.push_back({prefix + "weight", {k_, c_, r_, r_}, init_kind::uniform_fan_in, fan_in, 0.f, true});
  if (bias_)
    p.push_back({prefix + "bias", {k_}, init_kind::uniform_fan_in, fan_in});
}

void conv2d::bind(param_binder& b) {
  layer::bind(b);
  w_ = b.param("weight", {k_, c_, r_, r_});
  if (bias_)
    b_ = b.param("bias", {k_});
}

int conv2d::plan_layout(int, int block) {
  block_ = block > 0 && !bias_ && be().conv_takes_block(c_, k_, block) ? block : 0;
  return block_;
}

const tensor& conv2d::forward(const tensor& x, bool) {
  auto g = geom(x.shape());
  x_ = x;
  y_ = y_buf_.get({g.n, k_, g.out_h(), g.out_w()}, x.dev());
  auto ws_floats = static_cast<std::int64_t>((be().conv2d_workspace_bytes(g) + 3) / 4);
  ws_ = ws_buf_.get({ws_floats}, x.dev());
  be().conv2d_forward(g, x.data(), w_.value.data(), y_.data(), ws_.raw());
  if (bias_)
    be().bias_add_nchw(y_.data(), b_.value.data(), g.n, k_, g.out_h() * g.out_w());
  return y_;
}

const tensor& conv2d::backward(const tensor& dy, bool need_dx) {
  auto g = geom(x_.shape());
  if (!grads_zeroed_)
    be().fill(w_.grad.data(), static_cast<std::size_t>(w_.grad.numel()), 0.f);
  if (bias_) {
    if (!grads_zeroed_)
      be().fill(b_.grad.data(), static_cast<std::size_t>(k_), 0.f);
    be().bias_grad_nchw(dy.data(), b_.grad.data(), g.n, k_, g.out_h() * g.out_w());
  }
  dx_ = need_dx ? dx_buf_.get(x_.shape(), dy.dev()) : tensor();
  be().conv2d_backward(g, x_.data(), w_.value.data(), dy.data(), need_dx ? dx_.data() : nullptr,
                       w_.grad.data(), ws_.raw());
  return dx_;
}

} // namespace gradwire::models
