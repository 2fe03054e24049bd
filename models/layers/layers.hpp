#pragma once
/// @file layers.hpp
/// The concrete layers. Shapes in comments: N batch, C/K channels in/out,
/// H/W height and width. All activations are NCHW or [N, features].

#include "models/layer.hpp"

#include <memory>

namespace gradwire::models {

/// y[N, out] = x[N, in] W^T + b, W is [out, in].
class linear final : public layer {
public:
  linear(int in, int out) : in_(in), out_(out) {}
  std::string name() const override { return "linear"; }
  shape_t output_shape(const shape_t& in) const override;
  void describe(std::vector<param_spec>& p, std::vector<param_spec>& s,
                const std::string& prefix) const override;
  void bind(param_binder& b) override;
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;
  double forward_flops(const shape_t&) const override { return 2.0 * in_ * out_; }
  /// Outputs max(0, y) from now on: the network calls this when a relu
  /// follows, which then passes its input through (see relu::input_rectified).
  void fuse_relu() { relu_out_ = true; }

private:
  int in_, out_;
  bool relu_out_ = false;
  param_binder::bound w_, b_;
  tensor x_, y_, dx_;
  scratch y_buf_, dx_buf_;
};

/// y[N, K, OH, OW] = conv(x[N, C, H, W], W[K, C, R, R]) (+ b[K]).
class conv2d final : public layer {
public:
  conv2d(int in_ch, int out_ch, int kernel, int stride, int pad, bool bias)
    : c_(in_ch), k_(out_ch), r_(kernel), stride_(stride), pad_(pad), bias_(bias) {}
  std::string name() const override { return "conv2d"; }
  shape_t output_shape(const shape_t& in) const override;
  void describe(std::vector<param_spec>& p, std::vector<param_spec>& s,
                const std::string& prefix) const override;
  void bind(param_binder& b) override;
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;
  double forward_flops(const shape_t& in) const override;
  /// Blocked where the backend's convolution takes the block natively (no bias).
  int plan_layout(int in, int block) override;

private:
  kernels::conv_geom geom(const shape_t& in) const;
  int c_, k_, r_, stride_, pad_;
  bool bias_;
  int block_ = 0;
  param_binder::bound w_, b_;
  tensor x_, y_, dx_, ws_;
  scratch y_buf_, dx_buf_, ws_buf_;
};

/// Elementwise max(x, 0).
class relu final : public layer {
public:
  std::string name() const override { return "relu"; }
  shape_t output_shape(const shape_t& in) const override { return in; }
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;
  /// The layer before already applies max(0, .) (linear::fuse_relu):
  /// forward passes its input through; backward is unchanged.
  void input_rectified() { rectified_ = true; }
  /// The layer before applies max(0, .) and its backward too
  /// (batchnorm2d::fuse_relu): both directions pass through.
  void folded_into_previous() { rectified_ = folded_ = true; }
  /// Elementwise: any layout, the one it is offered.
  int plan_layout(int in, int) override { return in; }

private:
  bool rectified_ = false, folded_ = false;
  tensor y_, dx_;
  scratch y_buf_, dx_buf_;
};

/// [N, C, H, W] -> [N, C*H*W], a view (no copy).
class flatten final : public layer {
public:
  std::string name() const override { return "flatten"; }
  shape_t output_shape(const shape_t& in) const override;
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;

private:
  shape_t in_shape_;
  tensor y_, dx_;
};

/// Max over size x size windows with the given stride (no padding).
class maxpool2d final : public layer {
public:
  explicit maxpool2d(int size, int stride) : size_(size), stride_(stride) {}
  std::string name() const override { return "maxpool2d"; }
  shape_t output_shape(const shape_t& in) const override;
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;

private:
  kernels::pool_geom geom(const shape_t& in) const;
  int size_, stride_;
  shape_t in_shape_;
  tensor y_, arg_, dx_;
  scratch y_buf_, arg_buf_, dx_buf_;
};

/// [N, C, H, W] -> [N, C], the mean over H*W.
class global_avgpool final : public layer {
public:
  std::string name() const override { return "global_avgpool"; }
  shape_t output_shape(const shape_t& in) const override { return {in[0], in[1]}; }
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;

private:
  shape_t in_shape_;
  tensor y_, dx_;
  scratch y_buf_, dx_buf_;
};

/// Per-channel batch normalisation (PyTorch BatchNorm2d: momentum 0.1, eps 1e-5).
class batchnorm2d final : public layer {
public:
  explicit batchnorm2d(int channels) : c_(channels) {}
  std::string name() const override { return "batchnorm2d"; }
  shape_t output_shape(const shape_t& in) const override { return in; }
  void describe(std::vector<param_spec>& p, std::vector<param_spec>& s,
                const std::string& prefix) const override;
  void bind(param_binder& b) override;
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;
  /// Outputs max(0, .) from now on, and its backward masks the gradient by
  /// that output (one pass fewer each way); the relu after it folds in
  /// (relu::folded_into_previous). The same bits as the two layers apart.
  void fuse_relu() { relu_out_ = true; }
  /// Blocked whenever the backend has blocks that divide its channels.
  int plan_layout(int in, int block) override;

private:
  int c_;
  int block_ = 0;
  bool relu_out_ = false;
  param_binder::bound gamma_, beta_;
  tensor running_mean_, running_var_;
  bool owns_state_ = false;
  tensor x_, y_, dx_, save_mean_, save_invstd_;
  scratch y_buf_, dx_buf_;
};

/// Fuses each linear or batchnorm2d with the relu right after it (the
/// relu's place, and so every parameter's name, stays). BatchNorm's fusion
/// can be turned off for tests (set_batchnorm_relu_fusion), before a model
/// is built.
void fuse_activations(std::vector<std::unique_ptr<layer>>& layers);
void set_batchnorm_relu_fusion(bool on);

/// ResNet basic block: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)), the
/// shortcut being identity or, when the shape changes, 1x1 conv + bn.
class residual_block final : public layer {
public:
  residual_block(int in_ch, int out_ch, int stride);
  std::string name() const override { return "residual_block"; }
  shape_t output_shape(const shape_t& in) const override;
  void describe(std::vector<param_spec>& p, std::vector<param_spec>& s,
                const std::string& prefix) const override;
  void bind(param_binder& b) override;
  const tensor& forward(const tensor& x, bool train) override;
  const tensor& backward(const tensor& dy, bool need_dx) override;
  double forward_flops(const shape_t& in) const override;
  /// Blocked when every layer inside can be, else NCHW throughout.
  int plan_layout(int in, int block) override;

private:
  /// Plans every layer inside for `layout`: whether all of them took it.
  bool plan_all(int layout);
  std::vector<std::unique_ptr<layer>> main_, shortcut_;
  relu out_relu_;
  tensor sum_, dx_;
  scratch sum_buf_, dx_buf_;
};

} // namespace gradwire::models
