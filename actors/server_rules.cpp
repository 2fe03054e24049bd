/// @file server_rules.cpp
/// The parameter server's rules (server_rule.hpp), one class each:
///   sync          every live worker's gradient of a version (less the
///                 backups), weighted by samples, one optimizer step;
///   local SGD     every worker's parameters after its local steps, averaged;
///   DiLoCo        that average as an outer step (Douillard et al. 2023);
///   async         each gradient at once, at lr / staleness (staleness_lr),
///                 corrected for its delay (DC-ASGD);
///   async DiLoCo  each worker's pseudo-gradient at once through the outer
///                 optimizer, with delayed Nesterov (Liu et al. 2024).
/// make_server_rule at the end is the one reader of ps_options here; a
/// family with a rule of its own hands it over in shard_config::make_rule.
#include "actors/ps_plan.hpp"
#include "actors/ps_shard_state.hpp"
#include "actors/server_rule.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "kernels/host_vector.hpp"

#include <algorithm>
#include <cstring>

namespace gradwire::actors::shard_detail {

namespace {

kernels::backend& cpu() { return kernels::backend_for(kernels::device::cpu()); }

/// The staleness-aware learning rate's factor: 1 / max(1, staleness).
float staleness_factor(bool on, std::int64_t staleness) {
  return on ? 1.f / static_cast<float>(std::max<std::int64_t>(1, staleness)) : 1.f;
}

/// Sync: a version's gradients, the mean over all their samples, one step.
/// Backup workers: the first live - backups pushes on the current version
/// complete it; later ones for an old version are dropped and counted.
class sync_rule final : public server_rule {
public:
  sync_rule(int backups, std::int64_t last_version) : backups_(backups), last_version_(last_version) {}
  const char* name() const override { return "sync"; }
  bool rounds() const override { return true; }
  int needed(int live) const override { return live - backups_; }
  bool by_samples() const override { return true; }
  std::optional<std::int64_t> screen(shard_state& st, int rank, std::int64_t base_version) override {
    if (backups_ == 0)
      return {};
    if (last_version_ > 0 && st.version >= last_version_)
      return -2; // the run is over here: neither applied nor dropped
    if (base_version < st.version) {
      ++st.dropped[static_cast<std::size_t>(rank)]; // a backup worker's late push
      return -1;
    }
    return {};
  }
  void complete(shard_state& st, float* sum, int /*pushes*/, std::int64_t samples) override {
    cpu().scale(len(st), 1.f / static_cast<float>(samples), sum);
    apply(st, sum, 1.f);
  }

private:
  int backups_;
  std::int64_t last_version_;
};

/// Local SGD: the shard's slice becomes the mean of the pushed parameters.
/// Compressed pushes are pseudo-gradients (pulled minus own), whose mean
/// is subtracted: the outer step at lr 1.
class local_sgd_rule : public server_rule {
public:
  explicit local_sgd_rule(bool deltas) : deltas_(deltas) {}
  const char* name() const override { return "local SGD"; }
  bool rounds() const override { return true; }
  bool counts_staleness() const override { return false; }
  void complete(shard_state& st, float* sum, int pushes, std::int64_t /*samples*/) override {
    cpu().scale(len(st), 1.f / static_cast<float>(pushes), sum);
    step(st, sum);
    next_version(st);
  }

protected:
  /// The update from the mean of the pushes.
  virtual void step(shard_state& st, float* mean) {
    if (deltas_)
      cpu().axpy(len(st), -1.f, mean, st.params.data());
    else
      std::memcpy(st.params.data(), mean, len(st) * sizeof(float));
  }
  bool deltas_;
};

/// DiLoCo: the mean as the outer optimizer's step on the pseudo-gradient
/// (the global parameters minus the mean of the pushed ones).
class diloco_rule final : public local_sgd_rule {
public:
  diloco_rule(bool deltas, float outer_lr, float outer_momentum)
      : local_sgd_rule(deltas), outer_(outer_optimizer(outer_lr, outer_momentum)) {}
  const char* name() const override { return "DiLoCo"; }
  models::optimizer_spec optimizer(const shard_config& /*cfg*/) const override { return outer_; }

private:
  void step(shard_state& st, float* mean) override {
    if (!deltas_)
      kernels::subtract_from(len(st), st.params.data(), mean);
    st.opt->begin_step();
    st.opt->update(st.params.data(), mean, 0, len(st));
  }
  models::optimizer_spec outer_;
};

/// Async: each gradient applied as it comes, at lr / staleness with
/// staleness_lr; DC-ASGD corrects it for its delay first,
/// g + lambda g^2 (w_now - w_read), w_read the slice the worker last pulled.
class async_rule final : public server_rule {
public:
  async_rule(bool staleness_lr, float dc_lambda, std::size_t workers, std::size_t n, const slice& initial)
      : staleness_lr_(staleness_lr), lambda_(dc_lambda) {
    if (lambda_ > 0.f) {
      read_.assign(workers, initial);
      corrected_ = slice::empty({static_cast<std::int64_t>(n)});
    }
  }
  const char* name() const override { return "async"; }
  bool rounds() const override { return false; }
  void apply_push(shard_state& st, int rank, std::int64_t staleness, const float* g, float lr_scale) override {
    const float scale = staleness_factor(staleness_lr_, staleness) * lr_scale;
    if (lambda_ > 0.f) { // delay compensation
      kernels::delay_compensate(len(st), lambda_, g, st.params.data(), read_[static_cast<std::size_t>(rank)].data(),
                                corrected_.data());
      g = corrected_.data();
    }
    apply(st, g, scale);
  }
  void answered(int rank, const slice& snap) override {
    if (lambda_ > 0.f)
      read_[static_cast<std::size_t>(rank)] = snap;
  }

private:
  bool staleness_lr_;
  float lambda_;
  std::vector<slice> read_; ///< DC-ASGD: the slice each rank last pulled
  slice corrected_;         ///< DC-ASGD: scratch for the corrected gradient
};

/// Async DiLoCo: each worker's pseudo-gradient through the outer optimizer
/// as it comes. Delayed Nesterov (outer_delay > 1): of every outer_delay
/// pushes the first outer_delay - 1 are plain steps at the outer lr (the
/// momentum left alone), the last the Nesterov step on the mean of all.
class async_diloco_rule final : public server_rule {
public:
  async_diloco_rule(bool staleness_lr, float outer_lr, float outer_momentum, int delay, std::size_t n)
      : staleness_lr_(staleness_lr), outer_(outer_optimizer(outer_lr, outer_momentum)), delay_(delay) {
    if (delay_ > 1)
      delayed_ = slice::zeros({static_cast<std::int64_t>(n)});
  }
  const char* name() const override { return "async DiLoCo"; }
  bool rounds() const override { return false; }
  models::optimizer_spec optimizer(const shard_config& /*cfg*/) const override { return outer_; }
  void apply_push(shard_state& st, int /*rank*/, std::int64_t staleness, const float* g, float lr_scale) override {
    const float scale = staleness_factor(staleness_lr_, staleness) * lr_scale;
    if (delay_ <= 1) {
      apply(st, g, scale);
      return;
    }
    cpu().axpy(len(st), scale, g, delayed_.data());
    if (++count_ < delay_) {
      apply_plain(st, g, outer_.lr * scale);
      return;
    }
    cpu().scale(len(st), 1.f / static_cast<float>(count_), delayed_.data());
    apply(st, delayed_.data(), 1.f);
    cpu().fill(delayed_.data(), len(st), 0.f);
    count_ = 0;
  }
  void save(snapshot& out) const override {
    if (delay_ <= 1)
      return;
    out.put("delayed", delayed_.to_vector()); // the pushes since the last Nesterov step
    out.put("delayed_count", count_);
  }
  void restore(const snapshot& in) override {
    if (delay_ <= 1 || !in.has("delayed"))
      return;
    const auto& d = in.f("delayed");
    count_ = in.one("delayed_count");
    check(d.size() == static_cast<std::size_t>(delayed_.numel()) && count_ >= 0 && count_ < delay_,
          in.who + ": a malformed delayed-Nesterov buffer");
    std::memcpy(delayed_.data(), d.data(), d.size() * sizeof(float));
  }

private:
  bool staleness_lr_;
  models::optimizer_spec outer_;
  int delay_;
  slice delayed_;          ///< the pushes since the last Nesterov step, summed
  std::int64_t count_ = 0; ///< how many
};

} // namespace

models::optimizer_spec outer_optimizer(float lr, float momentum) {
  models::optimizer_spec outer;
  outer.kind = "sgd";
  outer.lr = lr;
  outer.momentum = momentum;
  outer.nesterov = momentum > 0.f;
  return outer;
}

models::optimizer_spec server_rule::optimizer(const shard_config& cfg) const {
  auto opt = cfg.opt;
  opt.offset = cfg.begin;
  return opt;
}

std::optional<std::int64_t> server_rule::screen(shard_state& /*st*/, int /*rank*/, std::int64_t /*base_version*/) {
  return {};
}

void server_rule::complete(shard_state& /*st*/, float* /*sum*/, int /*pushes*/, std::int64_t /*samples*/) {
  throw error(std::string("the ") + name() + " rule applies each push as it comes: it has no rounds");
}

void server_rule::apply_push(shard_state& /*st*/, int /*rank*/, std::int64_t /*staleness*/, const float* /*grad*/,
                             float /*lr_scale*/) {
  throw error(std::string("the ") + name() + " rule completes rounds: it applies no push alone");
}

std::unique_ptr<server_rule> make_server_rule(const shard_config& cfg, std::size_t len, const slice& initial) {
  const auto& ps = cfg.ps;
  const bool deltas = cfg.compress.mode != models::compress_mode::none; // compressed: pseudo-gradients
  if (cfg.make_rule)
    return cfg.make_rule(len, initial);
  if (ps.python_rule())
    return make_python_rule(cfg, len);
  if (ps.outer_async())
    return std::make_unique<async_diloco_rule>(ps.staleness_lr, ps.outer_lr, ps.outer_momentum, ps.outer_delay, len);
  if (ps.diloco())
    return std::make_unique<diloco_rule>(deltas, ps.outer_lr, ps.outer_momentum);
  if (ps.local_sgd())
    return std::make_unique<local_sgd_rule>(deltas);
  if (ps.sync)
    return std::make_unique<sync_rule>(ps.backups(), cfg.last_version);
  return std::make_unique<async_rule>(ps.staleness_lr, ps.dc(), static_cast<std::size_t>(std::max(1, cfg.workers)),
                                      len, initial);
}

} // namespace gradwire::actors::shard_detail

namespace gradwire::actors {

ps_plan ps_plan_of(const ps_options& ps) {
  ps_plan p;
  p.per_push = !ps.sync && !ps.local_sgd();
  p.waits_for_none = p.per_push && ps.bound() < 0;
  p.lock_step = ps.sync && ps.local_steps == 0 && ps.backups() == 0;
  p.steps_per_version = ps.local_sgd() ? ps.local_steps : p.lock_step ? 1 : 0;
  p.streaming = ps.streaming();
  p.pacing = ps.sync ? "sync" : ps.staleness_bound >= 0 ? "ssp" : "async";
  p.backups = ps.backups();
  p.dc_lambda = ps.dc();
  return p;
}

} // namespace gradwire::actors
