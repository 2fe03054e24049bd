#include "models/layers/layers.hpp"

#include "kernels/error.hpp"

namespace gradwire::models {

namespace {
constexpr float bn_momentum = 0.1f;
constexpr float bn_eps = 1e-5f;
} // namespace

void batchnorm2d::describe(std::vector<param_spec>& p, std::vector<param_spec>& s,
                           const std::string& prefix) const {
  p.push_back({prefix + "weight", {c_}, init_kind::ones, 1});
  p.push_back({prefix + "bias", {c_}, init_kind::zeros, 1});
  s.push_back({prefix + "running_mean", {c_}, init_kind::zeros, 1});
  s.push_back({prefix + "running_var", {c_}, init_kind::ones, 1});
}

void batchnorm2d::bind(param_binder& b) {
  layer::bind(b);
  gamma_ = b.param("weight", {c_});
  beta_ = b.param("bias", {c_});
  running_mean_ = b.state("running_mean", {c_});
  running_var_ = b.state("running_var", {c_});
  owns_state_ = b.owns_state();
}

int batchnorm2d::plan_layout(int, int block) {
  block_ = block > 0 && c_ % block == 0 && be().activation_block() == block ? block : 0;
  return block_;
}

const tensor& batchnorm2d::forward(const tensor& x, bool train) {
  check(x.rank() == 4 && x.dim(1) == c_, "batchnorm2d(" + std::to_string(c_) + ") got input " +
                                           kernels::to_string(x.shape()));
  const int n = static_cast<int>(x.dim(0)), hw = static_cast<int>(x.dim(2) * x.dim(3));
  x_ = x;
  y_ = y_buf_.get(x.shape(), x.dev());
  if (!train) {
    if (block_ > 0)
      be().batchnorm_forward_eval_blocked(x.data(), y_.data(), n, c_, hw, block_, gamma_.value.data(),
                                          beta_.value.data(), running_mean_.data(), running_var_.data(), bn_eps,
                                          relu_out_);
    else
      be().batchnorm_forward_eval(x.data(), y_.data(), n, c_, hw, gamma_.value.data(),
                                  beta_.value.data(), running_mean_.data(), running_var_.data(),
                                  bn_eps, relu_out_);
    return y_;
  }
  if (!save_mean_.defined() || save_mean_.dev() != x.dev()) {
    save_mean_ = tensor::empty({c_}, x.dev());
    save_invstd_ = tensor::empty({c_}, x.dev());
  }
  float* rmean = owns_state_ ? running_mean_.data() : nullptr;
  float* rvar = owns_state_ ? running_var_.data() : nullptr;
  if (block_ > 0)
    be().batchnorm_forward_train_blocked(x.data(), y_.data(), n, c_, hw, block_, gamma_.value.data(),
                                         beta_.value.data(), save_mean_.data(), save_invstd_.data(), rmean, rvar,
                                         bn_momentum, bn_eps, relu_out_);
  else
    be().batchnorm_forward_train(x.data(), y_.data(), n, c_, hw, gamma_.value.data(), beta_.value.data(),
                                 save_mean_.data(), save_invstd_.data(), rmean, rvar, bn_momentum, bn_eps,
                                 relu_out_);
  return y_;
}

const tensor& batchnorm2d::backward(const tensor& dy, bool need_dx) {
  const int n = static_cast<int>(x_.dim(0)), hw = static_cast<int>(x_.dim(2) * x_.dim(3));
  if (!grads_zeroed_) {
    be().fill(gamma_.grad.data(), static_cast<std::size_t>(c_), 0.f);
    be().fill(beta_.grad.data(), static_cast<std::size_t>(c_), 0.f);
  }
  // The kernel always produces dx; it is cheap next to the convolutions.
  dx_ = dx_buf_.get(x_.shape(), dy.dev());
  const float* mask = relu_out_ ? y_.data() : nullptr;
  if (block_ > 0)
    be().batchnorm_backward_blocked(x_.data(), dy.data(), dx_.data(), n, c_, hw, block_, gamma_.value.data(),
                                    save_mean_.data(), save_invstd_.data(), gamma_.grad.data(), beta_.grad.data(),
                                    mask);
  else
    be().batchnorm_backward(x_.data(), dy.data(), dx_.data(), n, c_, hw, gamma_.value.data(), save_mean_.data(),
                            save_invstd_.data(), gamma_.grad.data(), beta_.grad.data(), mask);
  if (!need_dx)
    dx_ = tensor();
  return dx_;
}

} // namespace gradwire::models
