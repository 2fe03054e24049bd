#pragma once
/// @file trainer.hpp
/// One worker's training step: forward, backward and optimizer update on a
/// model, over `threads` threads in one of two ways:
///  - batch: the batch is split over T replicas (micro-batch data
///    parallelism; gradients summed by range, then updated by range).
///    Gradients are scaled by 1/batch, so T replicas of b/T samples give the
///    same update as one replica of b. BatchNorm statistics are per replica,
///    as in DDP without SyncBatchNorm. Best for convolutional nets
///    (bench/RESULTS.md, "Training throughput vs PyTorch").
///  - layer: one replica whose layers split each GEMM by output block over
///    the threads. Each weight gradient is written once, not once per
///    replica, and nothing is summed; best when the per-step cost is the
///    weight-gradient GEMMs (MLP: 2 replicas were slower than 1 thread).
/// The optimizer update is split by range over the threads in both.

#include "kernels/thread_pool.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace gradwire::models {

struct step_result {
  /// Summed over the batch; a sample of several labels (a text window)
  /// counts the mean over its labels, so loss_sum / samples is the mean
  /// loss per label (nats per token) for every kind of data.
  double loss_sum = 0;
  double correct = 0; ///< correct predictions, in samples (a window's fraction of its labels)
  std::int64_t samples = 0;
  double grad_norm = 0; ///< the gradient's L2 norm before clipping (computed only with clip_norm)
  /// The loss or gradient was NaN or infinite and on_nonfinite = "skip"
  /// zeroed the gradient (loss_sum, correct and samples are then 0).
  bool skipped = false;
  double mean_loss() const { return samples ? loss_sum / static_cast<double>(samples) : 0; }
};

/// Thrown by compute_gradients when the loss or the gradient is NaN or
/// infinite and optimizer_spec::on_nonfinite is "stop"; what() says which.
struct nonfinite : gradwire::error {
  using gradwire::error::error;
};

struct eval_result {
  double loss = 0;     ///< mean per label (per token for text)
  double accuracy = 0; ///< fraction of labels predicted (next-token accuracy for text)
  std::int64_t samples = 0;
};

enum class parallelism { automatic, batch, layer };

/// "auto" | "batch" | "layer" (throws gradwire::error otherwise).
parallelism parse_parallelism(const std::string& text);

/// A step's dropout key for worker `rank` of a run seeded `seed`: masks
/// differ from step to step and worker to worker, and a resumed run draws
/// the ones it would have drawn.
std::uint64_t dropout_key(std::uint64_t seed, int rank, std::int64_t step);

class trainer {
public:
  /// automatic picks layer for MLPs and batch for convolutional networks.
  trainer(model& m, const optimizer_spec& opt, int threads, parallelism how = parallelism::automatic);

  /// Computes the gradient of the mean loss over `n` samples (host arrays;
  /// `y` holds n times the labels per sample) into gradients(); does not
  /// update parameters. With optimizer_spec::accumulate = k, in k
  /// micro-batches of n / k summed (the same gradient, less activation
  /// memory); with clip_norm, scaled to at most that L2 norm.
  /// `ready(from)` is called as gradients [from, size) become final, last
  /// with from = 0 (with one replica and nothing to do afterwards, during
  /// backward; otherwise once, at the end).
  step_result compute_gradients(const float* x, const std::int32_t* y, int n,
                                const std::function<void(std::size_t)>& ready = {});
  /// Later gradients are of the mean loss times `s` (folded into the loss
  /// gradient, so weighting a worker's gradient costs no pass over it).
  void set_loss_scale(float s) { loss_scale_ = s; }
  /// The next compute_gradients' dropout masks (model.dropout): a key for
  /// the step (dropout_key); each later call takes the key after it unless
  /// set again. Sample i of the step's batch gets the same mask however
  /// the batch is split over threads and micro-batches.
  void set_dropout_key(std::uint64_t key) { dropout_key_ = key; }
  /// Fault injection ([[faults]] kind = "nan"): the next compute_gradients
  /// ends with a NaN loss and gradient, as a diverging step would.
  void corrupt_next() { corrupt_next_ = true; }
  /// Applies the optimizer to the model from gradients() (or from `grads`,
  /// a buffer of the model's layout on its device), scaled by lr_scale.
  void apply(const float* grads = nullptr, float lr_scale = 1.f);
  /// 1-bit Adam's compressed stage: the step from the workers' mean Adam
  /// momentum `m` (optimizer::update_with_momentum), a buffer of the
  /// model's layout.
  void apply_momentum(const float* m);
  /// A gradient for [begin, end) of the parameter buffer held elsewhere
  /// (pieces of an allreduced gradient); `g` points at element `begin`.
  struct grad_slice {
    std::size_t begin = 0, end = 0;
    const float* g = nullptr;
  };
  /// Applies the optimizer from gradient slices covering the buffer.
  void apply_slices(const std::vector<grad_slice>& slices, float lr_scale = 1.f);
  /// A step applied range by range (a sharded optimizer): begin_update()
  /// once, then apply_range for ranges that together cover what this
  /// replica updates; `g` points at the gradient of element `begin`. The
  /// same updates as apply_slices, element for element.
  void begin_update() { opt_.begin_step(); }
  void apply_range(std::size_t begin, std::size_t end, const float* g, float lr_scale = 1.f);
  /// apply_range from the gradient (g0 + g1) * s, fused, also writing the
  /// updated parameters to w_out (optimizer::update_sum); false where the
  /// optimizer has no fused kernel (then nothing is done).
  bool apply_range_sum(std::size_t begin, std::size_t end, const float* g0, const float* g1, float s,
                       float* w_out, float lr_scale = 1.f);
  /// compute_gradients + apply.
  step_result step(const float* x, const std::int32_t* y, int n);
  /// Every replica's network stops a step between layers once `*flag` is
  /// set (network::abort_on): step() then throws step_aborted, with the
  /// parameters and the optimizer as before it.
  void abort_on(const std::atomic<bool>* flag) {
    for (auto& r : replicas_)
      r->net.abort_on(flag);
  }

  /// Mean loss and accuracy over `data` (or its first `limit` samples).
  /// Once `*stop` is set it gives up between two batches and throws
  /// step_aborted (a partial mean is no result).
  eval_result evaluate(const dataset& data, std::int64_t limit = 0, int batch_size = 1000,
                       const std::atomic<bool>* stop = nullptr);

  /// The summed gradient buffer after compute_gradients (model layout, model device).
  const tensor& gradients() const { return replicas_[0]->grads; }
  model& get_model() { return model_; }
  int threads() const { return static_cast<int>(pool_.size()); }
  /// The trainer's threads, for work between steps (batch gathering).
  kernels::thread_pool& pool() { return pool_; }
  /// The optimizer and its state (checkpoints save and restore it).
  optimizer& optim() { return opt_; }
  const optimizer& optim() const { return opt_; }
  /// The strategy in use (never automatic).
  parallelism strategy() const { return how_; }

private:
  bool corrupt_next_ = false;
  /// Rows [b, e) of the staged batch: forward, backward and the replicas'
  /// gradients summed into replica 0's. Returns the replicas used.
  /// The batch as tensors on the model's device: host views on the CPU,
  /// else copies into dev_x_ and dev_y_ (grown as needed).
  std::pair<tensor, tensor> batch_on_device(const float* x, const std::int32_t* y, int n);
  std::size_t micro_step(const tensor& xt, const tensor& yt, int b, int e, float scale,
                         const std::function<void(std::size_t)>* ready, step_result& total);
  /// Scales gradients() to at most clip_norm; returns the norm before.
  double clip();
  /// optimizer_spec::on_nonfinite applied to the step just computed.
  void check_finite(step_result& r, bool streamed);
  /// Whether gradient elements [begin, end) are all finite (always, on a device).
  bool gradient_finite(std::size_t begin, std::size_t end) const;
  /// Throws nonfinite when [begin, end) is not finite, unless on_nonfinite = "continue".
  void check_gradient_range(std::size_t begin, std::size_t end) const;
  /// Throws nonfinite when the loss is not finite, unless on_nonfinite = "continue".
  void check_loss(double loss_sum) const;

  float loss_scale_ = 1.f;
  std::uint64_t dropout_key_ = 0;
  int label_width_ = 1; ///< labels per sample: the network's output rows per input row
  model& model_;
  optimizer opt_;
  parallelism how_;
  kernels::thread_pool pool_;
  std::vector<std::unique_ptr<model::replica>> replicas_;
  std::vector<step_result> partial_;
  tensor dev_x_, dev_y_, dlogits_, acc_;
  std::vector<tensor> rep_dlogits_;
};

} // namespace gradwire::models
