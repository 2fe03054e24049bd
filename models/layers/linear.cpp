#include "models/layers/layers.hpp"

#include "kernels/error.hpp"
#include "kernels/parallel_gemm.hpp"

namespace gradwire::models {

shape_t linear::output_shape(const shape_t& in) const {
  check(in.size() == 2 && in[1] == in_, "linear(" + std::to_string(in_) + " -> " +
                                          std::to_string(out_) + ") got input " +
                                          kernels::to_string(in));
  return {in[0], out_};
}

void linear::describe(std::vector<param_spec>& p, std::vector<param_spec>&,
                      const std::string& prefix) const {
  p.push_back({prefix + "weight", {out_, in_}, init_kind::uniform_fan_in, in_});
  p.push_back({prefix + "bias", {out_}, init_kind::uniform_fan_in, in_});
}

void linear::bind(param_binder& b) {
  layer::bind(b);
  w_ = b.param("weight", {out_, in_});
  b_ = b.param("bias", {out_});
}

const tensor& linear::forward(const tensor& x, bool) {
  const int n = static_cast<int>(x.dim(0));
  x_ = x;
  y_ = y_buf_.get(output_shape(x.shape()), x.dev());
  kernels::parallel_gemm(be(), pool_, false, true, n, out_, in_, 1.f, x.data(), in_, w_.value.data(), in_,
                         0.f, y_.data(), out_);
  be().bias_add_rows(y_.data(), b_.value.data(), n, out_);
  return y_;
}

const tensor& linear::backward(const tensor& dy, bool need_dx) {
  const int n = static_cast<int>(dy.dim(0));
  // dW[out, in] = dy^T[out, N] x[N, in] (overwrites: beta = 0)
  kernels::parallel_gemm(be(), pool_, true, false, out_, in_, n, 1.f, dy.data(), out_, x_.data(), in_,
                         0.f, w_.grad.data(), in_);
  be().fill(b_.grad.data(), static_cast<std::size_t>(out_), 0.f);
  be().bias_grad_rows(dy.data(), b_.grad.data(), n, out_);
  if (!need_dx) {
    dx_ = tensor();
    return dx_;
  }
  // dx[N, in] = dy[N, out] W[out, in]
  dx_ = dx_buf_.get({n, in_}, dy.dev());
  kernels::parallel_gemm(be(), pool_, false, false, n, in_, out_, 1.f, dy.data(), out_,
                         w_.value.data(), in_, 0.f, dx_.data(), in_);
  return dx_;
}

} // namespace gradwire::models
