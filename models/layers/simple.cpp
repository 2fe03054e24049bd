// relu, flatten, maxpool2d and global_avgpool: layers without parameters.
#include "models/layers/layers.hpp"

#include "kernels/error.hpp"

namespace gradwire::models {

const tensor& relu::forward(const tensor& x, bool) {
  if (rectified_) {
    y_ = x;
    return y_;
  }
  y_ = y_buf_.get(x.shape(), x.dev());
  be().relu_forward(x.data(), y_.data(), static_cast<std::size_t>(x.numel()));
  return y_;
}

const tensor& relu::backward(const tensor& dy, bool need_dx) {
  if (!need_dx) {
    dx_ = tensor();
    return dx_;
  }
  if (folded_)
    return dy;
  dx_ = dx_buf_.get(dy.shape(), dy.dev());
  be().relu_backward(y_.data(), dy.data(), dx_.data(), static_cast<std::size_t>(dy.numel()));
  return dx_;
}

shape_t flatten::output_shape(const shape_t& in) const {
  check(!in.empty(), "flatten of a scalar");
  return {in[0], kernels::numel(in) / (in[0] == 0 ? 1 : in[0])};
}

const tensor& flatten::forward(const tensor& x, bool) {
  in_shape_ = x.shape();
  y_ = x.reshape(output_shape(x.shape()));
  return y_;
}

const tensor& flatten::backward(const tensor& dy, bool need_dx) {
  dx_ = need_dx ? dy.reshape(in_shape_) : tensor();
  return dx_;
}

kernels::pool_geom maxpool2d::geom(const shape_t& in) const {
  check(in.size() == 4, "maxpool2d got input " + kernels::to_string(in));
  kernels::pool_geom g;
  g.n = static_cast<int>(in[0]);
  g.c = static_cast<int>(in[1]);
  g.h = static_cast<int>(in[2]);
  g.w = static_cast<int>(in[3]);
  g.size = size_;
  g.stride = stride_;
  check(g.out_h() > 0 && g.out_w() > 0, "maxpool2d window " + std::to_string(size_) +
                                          " does not fit input " + kernels::to_string(in));
  return g;
}

shape_t maxpool2d::output_shape(const shape_t& in) const {
  auto g = geom(in);
  return {in[0], in[1], g.out_h(), g.out_w()};
}

const tensor& maxpool2d::forward(const tensor& x, bool) {
  auto g = geom(x.shape());
  in_shape_ = x.shape();
  auto out = output_shape(x.shape());
  y_ = y_buf_.get(out, x.dev());
  arg_ = arg_buf_.get(out, x.dev(), kernels::dtype::i32);
  be().maxpool_forward(g, x.data(), y_.data(), arg_.data_i32());
  return y_;
}

const tensor& maxpool2d::backward(const tensor& dy, bool need_dx) {
  if (!need_dx) {
    dx_ = tensor();
    return dx_;
  }
  dx_ = dx_buf_.get(in_shape_, dy.dev());
  be().maxpool_backward(geom(in_shape_), dy.data(), arg_.data_i32(), dx_.data());
  return dx_;
}

const tensor& global_avgpool::forward(const tensor& x, bool) {
  check(x.rank() == 4, "global_avgpool got input " + kernels::to_string(x.shape()));
  in_shape_ = x.shape();
  y_ = y_buf_.get(output_shape(x.shape()), x.dev());
  be().avgpool_global_forward(x.data(), y_.data(), static_cast<int>(x.dim(0)),
                              static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2) * x.dim(3)));
  return y_;
}

const tensor& global_avgpool::backward(const tensor& dy, bool need_dx) {
  if (!need_dx) {
    dx_ = tensor();
    return dx_;
  }
  dx_ = dx_buf_.get(in_shape_, dy.dev());
  be().avgpool_global_backward(dy.data(), dx_.data(), static_cast<int>(in_shape_[0]),
                               static_cast<int>(in_shape_[1]),
                               static_cast<int>(in_shape_[2] * in_shape_[3]));
  return dx_;
}

} // namespace gradwire::models
