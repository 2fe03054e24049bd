#include "models/trainer.hpp"

#include "kernels/backend.hpp"
#include "kernels/host_vector.hpp"
#include "kernels/cpu/denormals.hpp"
#include "kernels/dropout_mask.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace gradwire::models {
namespace {

/// [begin, end) of part `i` when `n` items are split into `parts`, each
/// boundary rounded to `align` items.
std::pair<std::size_t, std::size_t> part(std::size_t n, std::size_t parts, std::size_t i,
                                         std::size_t align = 1) {
  auto bound = [&](std::size_t k) {
    std::size_t b = n * k / parts;
    return k == parts ? n : std::min(n, b / align * align);
  };
  return {bound(i), bound(i + 1)};
}

/// A non-owning tensor over host memory the caller keeps alive.
tensor wrap_host(const void* p, const shape_t& shape, kernels::dtype dt) {
  const auto bytes = static_cast<std::size_t>(kernels::numel(shape)) * kernels::dtype_size(dt);
  auto st = std::make_shared<kernels::storage>(const_cast<void*>(p), bytes, kernels::device::cpu(),
                                               nullptr);
  return tensor(std::move(st), 0, shape, dt);
}

} // namespace

parallelism parse_parallelism(const std::string& text) {
  if (text == "auto")
    return parallelism::automatic;
  if (text == "batch")
    return parallelism::batch;
  if (text == "layer")
    return parallelism::layer;
  throw error("unknown parallelism '" + text + "' (known: auto, batch, layer)");
}

trainer::trainer(model& m, const optimizer_spec& opt, int threads, parallelism how)
  : model_(m), opt_(opt, m.size(), m.dev()),
    how_(how != parallelism::automatic ? how
                                       : (m.spec().kind == "mlp" ? parallelism::layer : parallelism::batch)),
    pool_(static_cast<std::size_t>(m.dev().is_cpu() ? std::max(threads, 1) : 1)) {
  if (how_ == parallelism::layer) {
    replicas_.push_back(m.make_replica(true, &pool_));
  } else {
    for (std::size_t i = 0; i < pool_.size(); ++i)
      replicas_.push_back(m.make_replica(i == 0));
  }
  partial_.resize(replicas_.size());
  rep_dlogits_.resize(replicas_.size());
  const auto& s = m.spec();
  const auto out = replicas_[0]->net.output_shape({1, s.channels, s.height, s.width});
  label_width_ = static_cast<int>(std::max<std::int64_t>(1, out[0]));
}

std::uint64_t dropout_key(std::uint64_t seed, int rank, std::int64_t step) {
  return kernels::splitmix64(kernels::splitmix64(seed ^ 0x6a09e667f3bcc909ull) + static_cast<std::uint64_t>(rank)) ^
         kernels::splitmix64(static_cast<std::uint64_t>(step));
}

std::pair<tensor, tensor> trainer::batch_on_device(const float* x, const std::int32_t* y, int n) {
  const auto& s = model_.spec();
  const shape_t xshape = {n, s.channels, s.height, s.width};
  const shape_t yshape = {static_cast<std::int64_t>(n) * label_width_};
  const auto dev = model_.dev();
  if (dev.is_cpu())
    return {wrap_host(x, xshape, kernels::dtype::f32), wrap_host(y, yshape, kernels::dtype::i32)};
  if (!dev_x_.defined() || dev_x_.numel() < kernels::numel(xshape))
    dev_x_ = tensor::empty({kernels::numel(xshape)}, dev);
  if (!dev_y_.defined() || dev_y_.numel() < yshape[0])
    dev_y_ = tensor::empty(yshape, dev, kernels::dtype::i32);
  tensor xt = dev_x_.view(0, {kernels::numel(xshape)}).reshape(xshape);
  tensor yt = dev_y_.view(0, yshape);
  kernels::copy(wrap_host(x, xshape, kernels::dtype::f32), xt);
  kernels::copy(wrap_host(y, yshape, kernels::dtype::i32), yt);
  return {xt, yt};
}

step_result trainer::compute_gradients(const float* x, const std::int32_t* y, int n,
                                       const std::function<void(std::size_t)>& ready) {
  check(n > 0, "empty batch");
  const auto dev = model_.dev();
  const auto [xt, yt] = batch_on_device(x, y, n);
  const auto& spec = opt_.spec();
  const int k = std::clamp(spec.accumulate, 1, n);
  const bool after = k > 1 || spec.clip_norm > 0.f; // the gradient changes after backward
  const float scale = loss_scale_ / (static_cast<float>(n) * static_cast<float>(label_width_));
  step_result total;
  std::size_t parts = 0;
  // A bucket handed to the exchange during backward is the exchange's from then
  // on: its finiteness is judged before it goes, never after.
  std::size_t unchecked_end = model_.size();
  bool streamed = false;
  const std::function<void(std::size_t)> checked_ready = [&](std::size_t from) {
    streamed = true;
    check_gradient_range(from, unchecked_end);
    unchecked_end = std::min(unchecked_end, from);
    ready(from);
  };
  const auto* stream = after || !ready ? nullptr : &checked_ready;
  for (int c = 0; c < k; ++c) {
    parts = micro_step(xt, yt, n * c / k, n * (c + 1) / k, scale, stream, total);
    if (k == 1)
      break;
    auto& be = kernels::backend_for(dev);
    if (c == 0) {
      if (!acc_.defined())
        acc_ = tensor::empty(replicas_[0]->grads.shape(), dev);
      kernels::copy(replicas_[0]->grads, acc_);
    } else {
      be.axpy(model_.size(), 1.f, replicas_[0]->grads.data(), acc_.data());
    }
  }
  if (k > 1)
    kernels::copy(acc_, replicas_[0]->grads);
  ++dropout_key_;
  if (spec.clip_norm > 0.f)
    total.grad_norm = clip();
  corrupt_next_ = false;
  check_finite(total, streamed);
  if ((parts > 1 || after) && ready)
    ready(0);
  return total;
}

bool trainer::gradient_finite(std::size_t begin, std::size_t end) const {
  const auto& g = replicas_[0]->grads;
  if (!g.dev().is_cpu()) // a device's gradient is judged by its loss alone (no copy back each step)
    return true;
  return kernels::all_finite(end - begin, g.data() + begin);
}

void trainer::check_gradient_range(std::size_t begin, std::size_t end) const {
  if (opt_.spec().on_nonfinite != "continue" && begin < end && !gradient_finite(begin, end))
    throw nonfinite("the gradient holds NaN or infinity");
}

void trainer::check_loss(double loss_sum) const {
  if (opt_.spec().on_nonfinite != "continue" && !std::isfinite(loss_sum))
    throw nonfinite("the loss is " + std::to_string(loss_sum));
}

void trainer::check_finite(step_result& r, bool streamed) {
  const auto& policy = opt_.spec().on_nonfinite;
  if (policy == "continue")
    return;
  const bool loss_ok = std::isfinite(r.loss_sum);
  // A streamed gradient was judged bucket by bucket and may be changing in the
  // exchange now.
  const bool grad_ok = !loss_ok || streamed || gradient_finite(0, model_.size());
  if (loss_ok && grad_ok)
    return;
  const std::string what = !loss_ok ? "the loss is " + std::to_string(r.loss_sum)
                                    : "the gradient holds NaN or infinity (the loss is finite)";
  if (policy != "skip")
    throw nonfinite(what);
  const auto& g = replicas_[0]->grads;
  kernels::backend_for(g.dev()).fill(g.data(), static_cast<std::size_t>(g.numel()), 0.f);
  r = step_result{};
  r.skipped = true;
}

std::size_t trainer::micro_step(const tensor& xt, const tensor& yt, int b0, int e0, float scale,
                                const std::function<void(std::size_t)>* ready, step_result& total) {
  const auto dev = model_.dev();
  const int n = e0 - b0;
  const std::size_t parts = std::min<std::size_t>(replicas_.size(), static_cast<std::size_t>(n));
  const auto lw = static_cast<std::size_t>(label_width_);
  pool_.run(parts, [&](std::size_t r) {
    auto [pb, pe] = part(static_cast<std::size_t>(n), parts, r);
    const std::size_t b = static_cast<std::size_t>(b0) + pb, rows = pe - pb;
    auto& rep = *replicas_[r];
    rep.net.set_dropout_stream(dropout_key_, static_cast<std::int64_t>(b));
    const tensor& logits = rep.net.forward(xt.rows(static_cast<std::int64_t>(b), static_cast<std::int64_t>(rows)), true);
    auto& dl = rep_dlogits_[r];
    if (!dl.defined() || dl.numel() < logits.numel())
      dl = tensor::empty(logits.shape(), dev);
    tensor dlv = dl.view(0, logits.shape());
    auto res = rep.net.loss(logits, yt.data_i32() + b * lw, dlv.data(), scale);
    if (corrupt_next_ && r == 0) { // fault injection: NaN through the whole backward, as a diverged loss gives
      constexpr float nan = std::numeric_limits<float>::quiet_NaN();
      kernels::backend_for(dev).fill(dlv.data(), static_cast<std::size_t>(dlv.numel()), nan);
      res.loss_sum = nan;
    }
    if (parts == 1 && ready != nullptr) // a streamed step's loss is judged before its first bucket goes
      check_loss(res.loss_sum);
    rep.net.backward(dlv, false, parts == 1 ? ready : nullptr);
    const double per = static_cast<double>(lw);
    partial_[r] = {res.loss_sum / per, static_cast<double>(res.correct) / per, static_cast<std::int64_t>(rows)};
  });
  if (parts > 1) {
    // Sum the replicas' gradients into replica 0's buffer, one range per thread.
    float* g0 = replicas_[0]->grads.data();
    pool_.run(parts, [&](std::size_t t) {
      auto [b, e] = part(model_.size(), parts, t, 16);
      for (std::size_t r = 1; r < parts; ++r)
        kernels::backend_for(dev).axpy(e - b, 1.f, replicas_[r]->grads.data() + b, g0 + b);
    });
  }
  for (std::size_t r = 0; r < parts; ++r) {
    total.loss_sum += partial_[r].loss_sum;
    total.correct += partial_[r].correct;
    total.samples += partial_[r].samples;
  }
  return parts;
}

double trainer::clip() {
  const tensor& g = replicas_[0]->grads;
  const double norm = std::sqrt(kernels::backend_for(g.dev()).sum_squares(g.data(), model_.size()));
  // PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  const double coef = static_cast<double>(opt_.spec().clip_norm) / (norm + 1e-6);
  if (coef < 1.0)
    kernels::backend_for(g.dev()).scale(model_.size(), static_cast<float>(coef), replicas_[0]->grads.data());
  return norm;
}

void trainer::apply(const float* grads, float lr_scale) {
  kernels::flush_denormals_on_this_thread();
  const float* g = grads != nullptr ? grads : replicas_[0]->grads.data();
  float* w = model_.params().data();
  opt_.begin_step();
  const std::size_t parts = pool_.size();
  if (parts == 1) {
    opt_.update(w, g, 0, model_.size(), lr_scale);
    return;
  }
  pool_.run(parts, [&](std::size_t t) {
    auto [b, e] = part(model_.size(), parts, t, 16);
    opt_.update(w, g, b, e, lr_scale);
  });
}

void trainer::apply_momentum(const float* m) {
  kernels::flush_denormals_on_this_thread();
  float* w = model_.params().data();
  opt_.begin_step();
  pool_.run(pool_.size(), [&](std::size_t t) {
    auto [b, e] = part(model_.size(), pool_.size(), t, 16);
    opt_.update_with_momentum(w, m, b, e);
  });
}

void trainer::apply_slices(const std::vector<grad_slice>& slices, float lr_scale) {
  kernels::flush_denormals_on_this_thread();
  float* w = model_.params().data();
  opt_.begin_step();
  const std::size_t parts = pool_.size();
  pool_.run(parts, [&](std::size_t t) {
    for (const auto& s : slices) {
      auto [b, e] = part(s.end - s.begin, parts, t, 16);
      opt_.update_from(w, s.g + b, s.begin + b, s.begin + e, lr_scale);
    }
  });
}

bool trainer::apply_range_sum(std::size_t begin, std::size_t end, const float* g0, const float* g1, float s,
                              float* w_out, float lr_scale) {
  kernels::flush_denormals_on_this_thread();
  return opt_.update_sum(model_.params().data(), g0, g1, s, begin, end, w_out, lr_scale);
}

void trainer::apply_range(std::size_t begin, std::size_t end, const float* g, float lr_scale) {
  kernels::flush_denormals_on_this_thread();
  opt_.update_from(model_.params().data(), g, begin, end, lr_scale);
}

step_result trainer::step(const float* x, const std::int32_t* y, int n) {
  auto r = compute_gradients(x, y, n);
  apply();
  return r;
}

eval_result trainer::evaluate(const dataset& data, std::int64_t limit, int batch_size, const std::atomic<bool>* stop) {
  batch_size = std::max(1, batch_size / data.label_width); // the same labels per batch for text windows
  const std::int64_t total = limit > 0 ? std::min(limit, data.size()) : data.size();
  const auto dev = model_.dev();
  const std::size_t parts = replicas_.size();
  std::vector<double> loss(parts, 0);
  std::vector<std::int64_t> correct(parts, 0);
  std::atomic<bool> cut{false}; // a replica saw the stop between two batches
  // Replica r evaluates the batches r, r + parts, ...
  pool_.run(parts, [&](std::size_t r) {
    tensor xbuf, ybuf;
    for (std::int64_t b0 = static_cast<std::int64_t>(r) * batch_size; b0 < total;
         b0 += static_cast<std::int64_t>(parts) * batch_size) {
      if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
        cut = true;
        break;
      }
      const auto n = std::min<std::int64_t>(batch_size, total - b0);
      const shape_t xs = {n, data.channels, data.height, data.width};
      tensor xt = wrap_host(data.image(b0), xs, kernels::dtype::f32);
      const shape_t ys = {n * data.label_width};
      tensor yt = wrap_host(data.label(b0), ys, kernels::dtype::i32);
      if (!dev.is_cpu()) {
        xbuf = tensor::empty(xs, dev);
        ybuf = tensor::empty(ys, dev, kernels::dtype::i32);
        kernels::copy(xt, xbuf);
        kernels::copy(yt, ybuf);
        xt = xbuf;
        yt = ybuf;
      }
      const tensor& logits = replicas_[r]->net.forward(xt, false);
      auto res = replicas_[r]->net.loss(logits, yt.data_i32(), nullptr, 0.f);
      loss[r] += res.loss_sum;
      correct[r] += res.correct;
    }
  });
  if (cut)
    throw step_aborted();
  eval_result out;
  out.samples = total;
  double l = 0;
  std::int64_t c = 0;
  for (std::size_t r = 0; r < parts; ++r) {
    l += loss[r];
    c += correct[r];
  }
  const double labels = static_cast<double>(total) * data.label_width;
  out.loss = total ? l / labels : 0;
  out.accuracy = total ? static_cast<double>(c) / labels : 0;
  return out;
}

} // namespace gradwire::models
