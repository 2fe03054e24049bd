// The GPT's forward and backward passes (gpt.hpp). Each block keeps its
// input, its LayerNorms' outputs and statistics, q/k/v, the attention output
// and its log-sum-exp, and the MLP's pre- and post-GELU activations:
// 16 d floats per token per block, the time x time scores never.
#include "models/layers/gpt.hpp"

#include "kernels/dropout_mask.hpp"
#include "kernels/error.hpp"
#include "kernels/parallel_gemm.hpp"

namespace gradwire::models {

namespace {

constexpr float layernorm_eps = 1e-5f;

std::size_t floats(const tensor& t) { return static_cast<std::size_t>(t.numel()); }

void linear_fwd(kernels::backend& be, kernels::thread_pool* pool, const float* x, const param_binder::bound& w,
                const param_binder::bound& b, float* y, int rows, int in, int out) {
  kernels::parallel_gemm(be, pool, false, true, rows, out, in, 1.f, x, in, w.value.data(), in, 0.f, y, out);
  be.bias_add_rows(y, b.value.data(), rows, out);
}

/// dW = dy^T x, db = column sums of dy (both overwritten); dx = dy W.
void linear_bwd(kernels::backend& be, kernels::thread_pool* pool, const float* x, const float* dy,
                const param_binder::bound& w, const param_binder::bound& b, float* dx, int rows, int in, int out) {
  kernels::parallel_gemm(be, pool, true, false, out, in, rows, 1.f, dy, out, x, in, 0.f, w.grad.data(), in);
  be.fill(b.grad.data(), static_cast<std::size_t>(out), 0.f);
  be.bias_grad_rows(dy, b.grad.data(), rows, out);
  kernels::parallel_gemm(be, pool, false, false, rows, in, out, 1.f, dy, out, w.value.data(), in, 0.f, dx, in);
}

/// LayerNorm's backward with dy and dx in one buffer; w and b's gradients overwritten.
void layernorm_bwd(kernels::backend& be, const tensor& x, float* dy_dx, const tensor& mean, const tensor& rstd,
                   const param_binder::bound& w, const param_binder::bound& b, int rows, int d) {
  be.fill(w.grad.data(), static_cast<std::size_t>(d), 0.f);
  be.fill(b.grad.data(), static_cast<std::size_t>(d), 0.f);
  be.layernorm_backward(x.data(), dy_dx, mean.data(), rstd.data(), w.value.data(), dy_dx, w.grad.data(),
                        b.grad.data(), rows, d);
}

} // namespace

kernels::attention_dropout gpt::attention_drop(std::size_t l) const {
  if (!dropping())
    return {};
  const auto site = 1 + 2 * static_cast<std::uint64_t>(blocks_.size()) + l;
  return {s_.dropout, kernels::dropout_site(drop_key_, site), first_sample_};
}

void gpt::drop(float* x, std::uint64_t site) const {
  if (!dropping())
    return;
  be().dropout(x, rows(), s_.d, s_.dropout, kernels::dropout_site(drop_key_, site), first_sample_ * t_);
}

const tensor& gpt::forward(const tensor& x, bool train) {
  const auto out_shape = output_shape(x.shape());
  const auto dev = x.dev();
  n_ = static_cast<int>(x.dim(0));
  t_ = static_cast<int>(x.dim(3));
  x_ = x;
  train_ = train;
  const int r = rows(), d = s_.d;
  auto& first = acts_[0];
  first.in = first.buf[0].get({r, d}, dev);
  be().embedding_forward(x.data(), wte_.value.data(), wpe_.value.data(), first.in.data(), n_, t_, d, s_.vocab);
  drop(first.in.data(), 0);
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    if (train)
      check_abort();
    tensor out;
    if (l + 1 < blocks_.size())
      out = acts_[l + 1].in = acts_[l + 1].buf[0].get({r, d}, dev);
    else
      out = h_ = h_buf_[0].get({r, d}, dev);
    block_forward(l, out);
  }
  norm_forward(h_, lnf_, lnf_w_, lnf_b_);
  // The head is tied to the token embedding: logits = z wte^T.
  logits_ = logits_buf_.get(out_shape, dev);
  kernels::parallel_gemm(be(), pool_, false, true, r, s_.vocab, d, 1.f, lnf_.y.data(), d, wte_.value.data(), d, 0.f,
                         logits_.data(), s_.vocab);
  return logits_;
}

void gpt::norm_forward(const tensor& x, norm_acts& n, const param_binder::bound& w, const param_binder::bound& b) {
  const int r = static_cast<int>(x.dim(0)), d = s_.d;
  n.y = n.buf[0].get({r, d}, x.dev());
  n.mean = n.buf[1].get({r}, x.dev());
  n.rstd = n.buf[2].get({r}, x.dev());
  be().layernorm_forward(x.data(), n.y.data(), n.mean.data(), n.rstd.data(), w.value.data(), b.value.data(), r, d,
                         layernorm_eps);
}

void gpt::block_forward(std::size_t l, tensor& out) {
  const auto& p = blocks_[l];
  auto& a = acts_[l];
  const auto dev = a.in.dev();
  const int r = rows(), d = s_.d;
  norm_forward(a.in, a.ln1, p.ln1_w, p.ln1_b);
  a.qkv = a.buf[1].get({r, 3 * d}, dev);
  linear_fwd(be(), pool_, a.ln1.y.data(), p.attn_w, p.attn_b, a.qkv.data(), r, d, 3 * d);
  a.att = a.buf[2].get({r, d}, dev);
  a.lse = a.buf[3].get({n_, s_.heads, t_}, dev);
  be().attention_forward(a.qkv.data(), a.att.data(), a.lse.data(), n_, t_, s_.heads, d, attention_drop(l));
  a.mid = a.buf[4].get({r, d}, dev);
  linear_fwd(be(), pool_, a.att.data(), p.proj_w, p.proj_b, a.mid.data(), r, d, d);
  drop(a.mid.data(), 1 + 2 * l);
  be().axpy(floats(a.mid), 1.f, a.in.data(), a.mid.data());
  norm_forward(a.mid, a.ln2, p.ln2_w, p.ln2_b);
  a.f = a.buf[5].get({r, 4 * d}, dev);
  linear_fwd(be(), pool_, a.ln2.y.data(), p.fc_w, p.fc_b, a.f.data(), r, d, 4 * d);
  a.g = a.buf[6].get({r, 4 * d}, dev);
  be().gelu_forward(a.f.data(), a.g.data(), floats(a.g));
  linear_fwd(be(), pool_, a.g.data(), p.mlp_w, p.mlp_b, out.data(), r, 4 * d, d);
  drop(out.data(), 2 + 2 * l);
  be().axpy(floats(out), 1.f, a.mid.data(), out.data());
}

const tensor& gpt::backward(const tensor& dlogits, bool) {
  const auto dev = dlogits.dev();
  const int r = rows(), d = s_.d;
  check(dlogits.numel() == static_cast<std::int64_t>(r) * s_.vocab, "gpt: backward without its forward");
  // The head's share of the embedding's gradient first (overwriting it),
  // the embedding's own scatter-add last.
  kernels::parallel_gemm(be(), pool_, true, false, s_.vocab, d, r, 1.f, dlogits.data(), s_.vocab, lnf_.y.data(), d,
                         0.f, wte_.grad.data(), d);
  dh_ = dh_buf_.get({r, d}, dev);
  kernels::parallel_gemm(be(), pool_, false, false, r, d, s_.vocab, 1.f, dlogits.data(), s_.vocab,
                         wte_.value.data(), d, 0.f, dh_.data(), d);
  layernorm_bwd(be(), h_, dh_.data(), lnf_.mean, lnf_.rstd, lnf_w_, lnf_b_, r, d);
  tmp_ = tmp_buf_.get({r, d}, dev);
  wide_ = wide_buf_.get({r, 4 * d}, dev);
  if (dropping())
    branch_ = branch_buf_.get({r, d}, dev);
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    check_abort();
    block_backward(l, dh_);
  }
  drop(dh_.data(), 0);
  be().fill(wpe_.grad.data(), floats(wpe_.grad), 0.f);
  be().embedding_backward(x_.data(), dh_.data(), wte_.grad.data(), wpe_.grad.data(), n_, t_, d, s_.vocab);
  return none_;
}

const float* gpt::branch(const tensor& dh, std::uint64_t site) {
  if (!dropping())
    return dh.data();
  kernels::copy(dh, branch_);
  drop(branch_.data(), site);
  return branch_.data();
}

void gpt::block_backward(std::size_t l, tensor& dh) {
  const auto& p = blocks_[l];
  auto& a = acts_[l];
  const int r = rows(), d = s_.d;
  float* wide = wide_.data();
  float* tmp = tmp_.data();
  // out = mid + dropout(mlp(ln_2(mid)))
  linear_bwd(be(), pool_, a.g.data(), branch(dh, 2 + 2 * l), p.mlp_w, p.mlp_b, wide, r, 4 * d, d);
  be().gelu_backward(a.f.data(), wide, wide, floats(a.f));
  linear_bwd(be(), pool_, a.ln2.y.data(), wide, p.fc_w, p.fc_b, tmp, r, d, 4 * d);
  layernorm_bwd(be(), a.mid, tmp, a.ln2.mean, a.ln2.rstd, p.ln2_w, p.ln2_b, r, d);
  be().axpy(floats(dh), 1.f, tmp, dh.data());
  // mid = in + dropout(c_proj(attention(c_attn(ln_1(in)))))
  linear_bwd(be(), pool_, a.att.data(), branch(dh, 1 + 2 * l), p.proj_w, p.proj_b, tmp, r, d, d);
  be().attention_backward(a.qkv.data(), a.att.data(), tmp, a.lse.data(), wide, n_, t_, s_.heads, d,
                          attention_drop(l));
  linear_bwd(be(), pool_, a.ln1.y.data(), wide, p.attn_w, p.attn_b, tmp, r, d, 3 * d);
  layernorm_bwd(be(), a.in, tmp, a.ln1.mean, a.ln1.rstd, p.ln1_w, p.ln1_b, r, d);
  be().axpy(floats(dh), 1.f, tmp, dh.data());
}

} // namespace gradwire::models
