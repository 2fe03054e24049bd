#pragma once
/// @file gpt.hpp
/// A decoder-only transformer (GPT-2's shape, nanoGPT's names): token and
/// learned position embeddings; `layers` blocks of pre-LayerNorm causal
/// multi-head self-attention and a GELU MLP of width 4d, each added to the
/// residual stream; a final LayerNorm; an output head tied to the token
/// embedding. One layer, because the tied head's gradient and the
/// embedding's meet in one buffer (the network's layers each own theirs).
///
/// Input [n, 1, 1, t] (token ids as floats, t <= context), output logits
/// [n * t, vocab]: row b * t + i predicts the token after position i.

#include "models/layer.hpp"

#include <vector>

namespace gradwire::models {

struct gpt_shape {
  int layers = 4, heads = 4, d = 128, context = 128, vocab = 256;
  /// Dropped in training, as nanoGPT drops them: the embeddings' sum,
  /// attention's probabilities and each block's two residual branches
  /// (after c_proj), each element with this probability.
  float dropout = 0.f;
};

class gpt final : public layer {
public:
  /// Throws gradwire::error when heads do not divide d or a size is not positive.
  explicit gpt(gpt_shape s);
  std::string name() const override { return "gpt"; }
  shape_t output_shape(const shape_t& in) const override;
  /// nanoGPT's parameter names (transformer.wte.weight, ...h.{i}.attn.c_attn.weight
  /// [3d, d], ...); GPT-2's init: N(0, 0.02), the residual projections
  /// N(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorm weights 1.
  void describe(std::vector<param_spec>& p, std::vector<param_spec>& s,
                const std::string& prefix) const override;
  void bind(param_binder& b) override;
  const tensor& forward(const tensor& x, bool train) override;
  /// Between two blocks too: a block at a long context takes seconds.
  void abort_on(const std::atomic<bool>* flag) override { abort_ = flag; }
  const tensor& backward(const tensor& dy, bool need_dx) override;
  void set_dropout_stream(std::uint64_t key, std::int64_t first_sample) override {
    drop_key_ = key, first_sample_ = first_sample;
  }
  double forward_flops(const shape_t& in) const override;
  /// 3x forward even as the first layer: every block's input gradient is computed.
  double train_flops(const shape_t& in, bool) const override { return 3 * forward_flops(in); }

private:
  /// A stop request between two blocks: step_aborted.
  void check_abort() const {
    if (abort_ != nullptr && abort_->load(std::memory_order_relaxed))
      throw step_aborted();
  }
  const std::atomic<bool>* abort_ = nullptr;
  struct block_params {
    param_binder::bound ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_w, mlp_b;
  };
  /// A LayerNorm's output and the row statistics its backward needs.
  struct norm_acts {
    tensor y, mean, rstd;
    scratch buf[3];
  };
  /// What one block's forward keeps for its backward.
  struct block_acts {
    tensor in, qkv, att, lse, mid, f, g;
    norm_acts ln1, ln2;
    scratch buf[7];
  };
  /// y = LayerNorm(x) with weights w and b, into `n`'s buffers.
  void norm_forward(const tensor& x, norm_acts& n, const param_binder::bound& w, const param_binder::bound& b);
  /// Block l from acts_[l].in into `out`.
  void block_forward(std::size_t l, tensor& out);
  /// dh (the gradient of the block's output) becomes that of its input.
  void block_backward(std::size_t l, tensor& dh);
  int rows() const { return n_ * t_; }
  /// Whether the last forward trained with dropout (its backward then masks too).
  bool dropping() const { return train_ && s_.dropout > 0.f; }
  /// Dropout at `site` (0: the embeddings, 1 + 2 l and 2 + 2 l: block l's
  /// attention and MLP branches) on x [rows, d], in training only; the same
  /// call on a gradient is its backward.
  void drop(float* x, std::uint64_t site) const;
  /// Block l's dropout of attention's probabilities (site 1 + 2 layers + l;
  /// none outside training).
  kernels::attention_dropout attention_drop(std::size_t l) const;
  /// dh as the gradient of a residual branch's output: dh itself, or with
  /// dropout its masked copy in branch_.
  const float* branch(const tensor& dh, std::uint64_t site);

  gpt_shape s_;
  param_binder::bound wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<block_params> blocks_;
  std::vector<block_acts> acts_;
  int n_ = 0, t_ = 0;
  bool train_ = false;
  std::uint64_t drop_key_ = 0;
  std::int64_t first_sample_ = 0;
  tensor x_, h_, logits_, dh_, tmp_, wide_, branch_;
  norm_acts lnf_;
  scratch h_buf_[2], logits_buf_, dh_buf_, tmp_buf_, wide_buf_, branch_buf_;
  tensor none_;
};

} // namespace gradwire::models
