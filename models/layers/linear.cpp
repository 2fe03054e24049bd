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
  p.push_back({prefix + "weight", {out_, in_}, init_kind::uniform_fan_in, in_, 0.f, true});
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
  // Bias and ReLU on each thread's block of y, while it is in that core's cache.
  float* y = y_.data();
  const float* bias = b_.value.data();
  kernels::parallel_gemm(be(), pool_, false, true, n, out_, in_, 1.f, x.data(), in_, w_.value.data(), in_,
                         0.f, y, out_, [&](int r0, int r1, int c0, int c1) {
                           if (c0 == 0 && c1 == out_) { // whole rows: one call each (one launch on a GPU)
                             float* blk = y + static_cast<std::ptrdiff_t>(r0) * out_;
                             const auto count = static_cast<std::size_t>(r1 - r0) * static_cast<std::size_t>(out_);
                             be().bias_add_rows(blk, bias, r1 - r0, out_);
                             if (relu_out_)
                               be().relu_forward(blk, blk, count);
                             return;
                           }
                           for (int r = r0; r < r1; ++r) {
                             float* row = y + static_cast<std::ptrdiff_t>(r) * out_ + c0;
                             be().bias_add_rows(row, bias + c0, 1, c1 - c0);
                             if (relu_out_)
                               be().relu_forward(row, row, static_cast<std::size_t>(c1 - c0));
                           }
                         });
  return y_;
}

const tensor& linear::backward(const tensor& dy, bool need_dx) {
  const int n = static_cast<int>(dy.dim(0));
  // dW[out, in] = dy^T[out, N] x[N, in] (overwrites: beta = 0), db = column sums of dy.
  auto weight_grads = [&](kernels::thread_pool* pool) {
    kernels::parallel_gemm(be(), pool, true, false, out_, in_, n, 1.f, dy.data(), out_, x_.data(), in_, 0.f,
                           w_.grad.data(), in_);
    if (!grads_zeroed_)
      be().fill(b_.grad.data(), static_cast<std::size_t>(out_), 0.f);
    be().bias_grad_rows(dy.data(), b_.grad.data(), n, out_);
  };
  // dx[N, in] = dy[N, out] W[out, in]
  auto input_grads = [&](kernels::thread_pool* pool) {
    kernels::parallel_gemm(be(), pool, false, false, n, in_, out_, 1.f, dy.data(), out_, w_.value.data(), in_,
                           0.f, dx_.data(), in_);
  };
  if (!need_dx) {
    weight_grads(pool_);
    dx_ = tensor();
    return dx_;
  }
  dx_ = dx_buf_.get({n, in_}, dy.dev());
  // The two cost the same (2 n in out FLOPs) and are independent: on two
  // threads each takes one whole GEMM (one fork-join, and neither packs
  // the other's operands, as splitting both would).
  if (pool_ != nullptr && pool_->size() == 2 && 2.0 * n * in_ * out_ >= 4e5) {
    pool_->run(2, [&](std::size_t t) { t == 0 ? weight_grads(nullptr) : input_grads(nullptr); });
  } else {
    weight_grads(pool_);
    input_grads(pool_);
  }
  return dx_;
}

} // namespace gradwire::models
