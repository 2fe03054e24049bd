#include "models/optimizer.hpp"

#include "kernels/backend.hpp"
#include "kernels/cpu/fused_optim.hpp"
#include "kernels/error.hpp"
#include "models/layer.hpp"

#include <algorithm>
#include <cmath>

namespace gradwire::models {

optimizer::optimizer(optimizer_spec spec, std::size_t n, kernels::device dev)
  : spec_(std::move(spec)), dev_(dev) {
  const auto len = static_cast<std::int64_t>(n);
  if (spec_.kind == "sgd") {
    if (spec_.momentum != 0.f)
      v_ = kernels::tensor::zeros({len}, dev);
  } else if (spec_.kind == "adam" || spec_.kind == "adamw") {
    m_ = kernels::tensor::zeros({len}, dev);
    v_ = kernels::tensor::zeros({len}, dev);
  } else {
    throw error("unknown optimizer '" + spec_.kind + "' (known: sgd, adam, adamw)");
  }
}

std::size_t optimizer::moments_size() const {
  return (m_.defined() ? static_cast<std::size_t>(m_.numel()) : 0) + (v_.defined() ? static_cast<std::size_t>(v_.numel()) : 0);
}

void optimizer::moments_into(float* out) const {
  for (const auto* t : {&m_, &v_})
    if (t->defined()) {
      kernels::backend_for(dev_).copy_bytes(out, kernels::device::cpu(), t->data(), dev_, t->bytes());
      out += t->numel();
    }
}

optimizer::saved optimizer::save() const {
  saved s;
  s.steps = step_;
  for (const auto* t : {&m_, &v_})
    if (t->defined()) {
      const auto v = t->to_vector();
      s.moments.insert(s.moments.end(), v.begin(), v.end());
    }
  return s;
}

void optimizer::load(const saved& s) {
  const std::size_t want = (m_.defined() ? static_cast<std::size_t>(m_.numel()) : 0) +
                           (v_.defined() ? static_cast<std::size_t>(v_.numel()) : 0);
  check(s.moments.size() == want, "optimizer state of " + std::to_string(s.moments.size()) + " floats for a " +
                                    spec_.kind + " optimizer that keeps " + std::to_string(want));
  check(s.steps >= 0, "optimizer state with a negative update count " + std::to_string(s.steps));
  std::size_t at = 0;
  for (auto* t : {&m_, &v_})
    if (t->defined()) {
      const auto n = static_cast<std::size_t>(t->numel());
      kernels::copy(kernels::tensor::from(std::vector<float>(s.moments.begin() + static_cast<std::ptrdiff_t>(at),
                                                             s.moments.begin() + static_cast<std::ptrdiff_t>(at + n)),
                                          {t->numel()}),
                    *t);
      at += n;
    }
  step_ = s.steps;
}

namespace {
/// The step (per worker, from 0) of update number `updates` (1 = the first).
double step_of(const lr_schedule& s, std::int64_t updates) {
  return static_cast<double>(std::max<std::int64_t>(0, updates - 1)) / std::max(1.0, s.updates_per_step);
}
} // namespace

float optimizer::lr_now() const {
  return spec_.schedule.active() ? static_cast<float>(spec_.lr * spec_.schedule.lr_factor(step_of(spec_.schedule, step_)))
                                 : spec_.lr;
}

float optimizer::momentum_now() const {
  return spec_.schedule.momentum_warmup_steps > 0
           ? static_cast<float>(spec_.momentum * spec_.schedule.momentum_factor(step_of(spec_.schedule, step_)))
           : spec_.momentum;
}

void optimizer::update(float* w, const float* g, std::size_t begin, std::size_t end,
                       float lr_scale) {
  if (end > begin)
    update_from(w, g + begin, begin, end, lr_scale);
}

void optimizer::update_from(float* w, const float* g, std::size_t begin, std::size_t end,
                            float lr_scale) {
  if (end <= begin)
    return;
  auto& be = kernels::backend_for(dev_);
  const std::size_t n = end - begin;
  const float lr = lr_now() * lr_scale;
  if (spec_.kind == "sgd") {
    be.sgd_update(n, lr, momentum_now(), spec_.weight_decay, spec_.nesterov, w + begin, g,
                  v_.defined() ? v_.data() + begin : nullptr);
  } else if (spec_.freeze_variance_after > 0 && step_ > spec_.freeze_variance_after) {
    if (spec_.kind == "adamw")
      decay(w, begin, end, lr);
    adam_frozen(w, g, begin, end, lr);
  } else {
    const bool decoupled = spec_.kind == "adamw";
    if (decoupled)
      decay(w, begin, end, lr);
    be.adam_update(n, lr, spec_.beta1, spec_.beta2, spec_.eps, decoupled ? 0.f : spec_.weight_decay,
                   step_ < 1 ? 1 : step_, w + begin, g, m_.data() + begin,
                   v_.data() + begin);
  }
}

void optimizer::frozen_step(float* w, std::size_t begin, std::size_t end, float lr) const {
  check(dev_.is_cpu(), "an Adam update with its variance frozen (compression.warmup) runs on the CPU, not " +
                         kernels::to_string(dev_));
  const double bc1 = 1.0 - std::pow(static_cast<double>(spec_.beta1), static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(spec_.beta2), static_cast<double>(spec_.freeze_variance_after));
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float* m = m_.data();
  const float* v = v_.data();
  for (std::size_t i = begin; i < end; ++i)
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + spec_.eps);
}

void optimizer::adam_frozen(float* w, const float* g, std::size_t begin, std::size_t end, float lr) {
  const float wd = spec_.kind == "adamw" ? 0.f : spec_.weight_decay, b1 = spec_.beta1;
  float* m = m_.data();
  for (std::size_t i = begin; i < end; ++i)
    m[i] = b1 * m[i] + (1.f - b1) * (g[i - begin] + wd * w[i]);
  frozen_step(w, begin, end, lr);
}

void optimizer::momentum_after(const float* w, const float* g, float* out, std::size_t n) const {
  check(m_.defined() && dev_.is_cpu() && spec_.freeze_variance_after > 0,
        "momentum exchange: an Adam optimizer on the CPU with its variance frozen (compression.warmup)");
  const float wd = spec_.kind == "adamw" ? 0.f : spec_.weight_decay, b1 = spec_.beta1;
  const float* m = m_.data();
  for (std::size_t i = 0; i < n; ++i)
    out[i] = b1 * m[i] + (1.f - b1) * (g[i] + wd * w[i]);
}

void optimizer::update_with_momentum(float* w, const float* m, std::size_t begin, std::size_t end, float lr_scale) {
  check(step_ > spec_.freeze_variance_after, "momentum exchange before the variance is frozen (step " +
                                               std::to_string(step_) + ")");
  const float lr = lr_now() * lr_scale;
  if (spec_.kind == "adamw")
    decay(w, begin, end, lr);
  std::copy(m + begin, m + end, m_.data() + begin);
  frozen_step(w, begin, end, lr);
}

void optimizer::decay(float* w, std::size_t begin, std::size_t end, float lr) {
  if (spec_.weight_decay == 0.f)
    return;
  const float keep = 1.f - lr * spec_.weight_decay;
  const std::size_t lo = begin + spec_.offset, hi = end + spec_.offset; // model buffer indices
  for (const auto& [b, e] : spec_.decay) {
    const std::size_t from = std::max(b, lo), to = std::min(e, hi);
    if (from < to)
      kernels::backend_for(dev_).scale(to - from, keep, w + (from - spec_.offset));
  }
}

std::vector<std::pair<std::size_t, std::size_t>> decay_ranges(const std::vector<param_spec>& specs,
                                                              const std::vector<std::size_t>& offsets) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (specs[i].decay)
      out.emplace_back(offsets[i], offsets[i] + static_cast<std::size_t>(kernels::numel(specs[i].shape)));
  return out;
}

bool optimizer::update_sum(float* w, const float* g0, const float* g1, float s, std::size_t begin,
                           std::size_t end, float* w_out, float lr_scale) {
  if (spec_.kind != "sgd" || !dev_.is_cpu())
    return false;
  if (end > begin)
    kernels::cpu::sgd_update_sum(end - begin, lr_now() * lr_scale, momentum_now(), spec_.weight_decay,
                                 spec_.nesterov, w + begin, g0, g1, s,
                                 v_.defined() ? v_.data() + begin : nullptr, w_out);
  return true;
}

} // namespace gradwire::models
