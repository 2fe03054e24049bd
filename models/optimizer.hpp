#pragma once
/// @file optimizer.hpp
/// Optimizers over one contiguous parameter buffer, updatable by range so
/// that several threads (or parameter-server shards) each update a slice.

#include "kernels/tensor.hpp"
#include "models/lr_schedule.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gradwire::models {

struct optimizer_spec {
  std::string kind = "sgd"; ///< "sgd" | "adam" | "adamw"
  float lr = 0.05f;
  float momentum = 0.9f;     ///< sgd
  /// sgd, adam: L2, added to the gradient of every parameter (PyTorch's
  /// SGD and Adam). adamw: decoupled, w -= lr * weight_decay * w, on the
  /// ranges in `decay` only (PyTorch's AdamW).
  float weight_decay = 0.f;
  bool nesterov = false;     ///< sgd
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f; ///< adam, adamw
  lr_schedule schedule; ///< lr and momentum over the run (constant by default)
  /// adamw: [begin, end) ranges of the model's parameter buffer that decay
  /// (param_spec::decay: weight matrices), sorted; `offset` is the buffer
  /// index of this optimizer's element 0 (a parameter-server shard's begin).
  std::vector<std::pair<std::size_t, std::size_t>> decay;
  std::size_t offset = 0;
  // What a worker does to its gradient before it is applied or sent
  // (trainer::compute_gradients), in every topology alike:
  float clip_norm = 0.f; ///< > 0: scale the gradient to at most this L2 norm
  int accumulate = 1;    ///< micro-batches per step, their gradients summed
  /// A loss or gradient that is NaN or infinite: "stop" throws nonfinite
  /// (trainer.hpp), "skip" zeroes the step's gradient and leaves its loss
  /// out of the averages, "continue" does neither.
  std::string on_nonfinite = "stop";
  /// adam, adamw: > 0, the second moment stops updating after this many
  /// steps (its bias correction with it), as 1-bit Adam (Tang et al. 2021)
  /// freezes it once its compression starts: each later update is then
  /// linear in the gradient, so error feedback's delayed values add up to
  /// what was held back (compression.warmup). Host memory only.
  std::int64_t freeze_variance_after = 0;
};

/// The decayed ranges of a model's parameter buffer (optimizer_spec::decay).
struct param_spec;
std::vector<std::pair<std::size_t, std::size_t>> decay_ranges(const std::vector<param_spec>& specs,
                                                              const std::vector<std::size_t>& offsets);

class optimizer {
public:
  /// State for a buffer of `n` floats on `dev`.
  optimizer(optimizer_spec spec, std::size_t n, kernels::device dev);
  /// Starts a new step (Adam's bias correction counts steps).
  void begin_step() { ++step_; }
  /// Applies the update to w[begin, end) from g[begin, end).
  void update(float* w, const float* g, std::size_t begin, std::size_t end, float lr_scale = 1.f);
  /// The same, with the gradient of [begin, end) in its own buffer: `g`
  /// points at the gradient of element `begin` (an allreduced piece).
  void update_from(float* w, const float* g, std::size_t begin, std::size_t end, float lr_scale = 1.f);
  /// update_from with the gradient (g0 + g1) * s (g0 * s when g1 is null),
  /// g0 and g1 covering [begin, end), in one pass that also writes the new
  /// w[begin, end) to w_out (may be g0). Returns false, doing nothing,
  /// where there is no fused kernel (Adam, device memory).
  bool update_sum(float* w, const float* g0, const float* g1, float s, std::size_t begin, std::size_t end,
                  float* w_out, float lr_scale = 1.f);
  /// 1-bit Adam's compressed stage (freeze_variance_after passed, host
  /// memory): the momentum this optimizer would reach from gradient g on
  /// w[0, n), into out, its state unchanged; the workers exchange these.
  void momentum_after(const float* w, const float* g, float* out, std::size_t n) const;
  /// Its update from the workers' mean momentum m (the new state m), with
  /// the frozen second moment: w -= lr m / (sqrt(v) + eps), after adamw's
  /// decay. From one worker's own momentum_after it is update()'s step.
  void update_with_momentum(float* w, const float* m, std::size_t begin, std::size_t end, float lr_scale = 1.f);
  const optimizer_spec& spec() const { return spec_; }
  /// The learning rate and momentum of the current update (the schedule at
  /// this optimizer's step).
  float lr_now() const;
  float momentum_now() const;
  std::int64_t steps() const { return step_; }

  /// What an exact continuation needs (a checkpoint): the update count and
  /// the moment buffers (SGD's velocity; Adam's m then v), on the host.
  struct saved {
    std::int64_t steps = 0;
    std::vector<float> moments;
  };
  saved save() const;
  /// The moment buffers' floats (save().moments), and a copy of them into `out`.
  std::size_t moments_size() const;
  void moments_into(float* out) const;
  /// Restores save()'s output; throws gradwire::error when it does not fit
  /// this optimizer (another kind, momentum on or off, another size).
  void load(const saved& s);

private:
  /// Adam's step with v frozen (spec_.freeze_variance_after) on
  /// [begin, end), g pointing at element begin: m updated, then
  /// frozen_step.
  void adam_frozen(float* w, const float* g, std::size_t begin, std::size_t end, float lr);
  /// w -= lr m / (sqrt(v) + eps) on [begin, end), v and its bias
  /// correction as they were at the freeze.
  void frozen_step(float* w, std::size_t begin, std::size_t end, float lr) const;
  /// adamw's decoupled decay, w *= 1 - lr * weight_decay, on [begin, end)'s decayed parts.
  void decay(float* w, std::size_t begin, std::size_t end, float lr);

  optimizer_spec spec_;
  kernels::device dev_;
  kernels::tensor m_, v_;
  std::int64_t step_ = 0;
};

} // namespace gradwire::models
