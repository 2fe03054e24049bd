#include "actors/worker_core.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/coordinator_protocol.hpp"

#include "kernels/error.hpp"
#include "kernels/log.hpp"
#include "kernels/stop_aware.hpp"
#include "kernels/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

namespace gradwire::actors {

slice copy_of(const kernels::tensor& t) {
  if (t.numel() == 0)
    return {};
  auto out = slice::empty({t.numel()});
  std::memcpy(out.data(), t.data(), static_cast<std::size_t>(t.numel()) * sizeof(float));
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void worker_core::init(worker_config c) {
  keep_config(std::move(c));
  build();
}

void worker_core::keep_config(worker_config c) {
  cfg = std::move(c);
  if (!cfg.vclock)
    kernels::watch_stops();
  model_batch = cfg.batch_size;
  start = phase = now();
  tr = trace_ref::open(cfg.trace, "worker " + std::to_string(cfg.rank), cfg.vclock.get());
  jitter_rng.seed(cfg.seed * 7919 + static_cast<std::uint64_t>(cfg.rank));
}

void worker_core::build() {
  const auto seed = cfg.gossip.distinct_init ? cfg.seed + 1000003ULL * static_cast<std::uint64_t>(cfg.rank) : cfg.seed;
  model = std::make_unique<models::model>(cfg.spec, kernels::device::cpu(), seed);
  if (cfg.ring.shared_params.defined())
    model->share_params(cfg.ring.shared_params); // before the trainer binds its replicas
  trainer = std::make_unique<models::trainer>(*model, cfg.opt, cfg.threads, cfg.how);
  if (!cfg.device.is_cpu() || cfg.separate_compute) {
    compute_model = std::make_unique<models::model>(cfg.spec, cfg.device, 0);
    if (model->state().numel() > 0) // the same start (parameters go up every batch)
      kernels::copy(model->state(), compute_model->state());
    compute_trainer = std::make_unique<models::trainer>(*compute_model, cfg.opt, cfg.device.is_cpu() ? cfg.threads : 1, cfg.how);
  }
  apply_grad_weight();
  arm_stop();
  batches = std::make_unique<models::batcher>(
    models::worker_batcher(*cfg.data, cfg.rank, cfg.world, cfg.seed, cfg.partition, cfg.batch_size));
  last_epoch_loss = models::recent_mean(static_cast<std::size_t>(std::max<std::int64_t>(1, batches->batches_per_epoch())));
  if (cfg.resume)
    restore(*cfg.resume);
}

void worker_core::land_params() const {
  for (const auto& [at, p] : incoming)
    std::memcpy(model->params().data() + at, p.data(), p.bytes());
  incoming.clear();
}

void worker_core::send_snapshot(caf::event_based_actor* self, const caf::actor& to, snapshot_for what) const {
  land_params();
  // One copy of the floats, straight into the buffer that travels (and is
  // written to disk as it is): the only work a step pays for a checkpoint.
  const auto t0 = now();
  snapshot s;
  s.who = "worker " + std::to_string(cfg.rank);
  s.step = step;
  const auto& opt = trainer->optim();
  s.put("optimizer_steps", opt.steps());
  s.put("samples", report.samples);
  s.put("epoch", static_cast<std::int64_t>(batches->epoch()));
  s.put("position", batches->position());
  s.put("batch_size", static_cast<std::int64_t>(cfg.batch_size));
  if (save_extra)
    save_extra(s); // its float sections follow the moments
  const auto np = model->size(), ns = static_cast<std::size_t>(model->state().numel()), nm = opt.moments_size();
  std::vector<std::pair<std::string, std::size_t>> sizes{{"params", np}};
  if (ns > 0)
    sizes.emplace_back("state", ns);
  sizes.emplace_back("moments", nm);
  std::size_t total = np + ns + nm;
  for (const auto& [name, v] : s.floats) {
    sizes.emplace_back(name, v.size());
    total += v.size();
  }
  auto out = slice::empty({static_cast<std::int64_t>(total)});
  std::memcpy(out.data(), model->params().data(), np * sizeof(float));
  if (ns > 0)
    std::memcpy(out.data() + np, model->state().data(), ns * sizeof(float));
  opt.moments_into(out.data() + np + ns);
  float* extra = out.data() + np + ns + nm;
  for (const auto& [name, v] : s.floats) {
    std::memcpy(extra, v.data(), v.size() * sizeof(float));
    extra += v.size();
  }
  if (what == snapshot_for::donor)
    self->send(as_ring_worker(to), donor_atom::value, s.meta_for(sizes), std::move(out));
  else if (what == snapshot_for::replica)
    self->send(as_coordinator(to), replica_state_atom::value, s.meta_for(sizes), std::move(out));
  else
    self->send(to, snapshot_atom::value, s.meta_for(sizes), std::move(out));
  tr.span("snapshot", t0, now(), step);
}

void worker_core::adopt(const snapshot& s) {
  incoming.clear(); // older than what it adopts
  const auto fit = [&](const std::string& name, const kernels::tensor& t) {
    const auto& v = s.f(name);
    check(v.size() == static_cast<std::size_t>(t.numel()),
          s.who + ": '" + name + "' holds " + std::to_string(v.size()) + " floats, this model " + std::to_string(t.numel()));
    kernels::copy(kernels::tensor::from(v, {t.numel()}), t);
  };
  fit("params", model->params());
  if (model->state().numel() > 0)
    fit("state", model->state());
  if (compute_model && model->state().numel() > 0)
    kernels::copy(model->state(), compute_model->state());
  trainer->optim().load({s.one("optimizer_steps"), s.f("moments")});
  step = s.step;
}

void worker_core::adopt_donor(const snapshot& s) {
  adopt(s);
  // A worker back after a stall, or a new process, is epochs behind: it
  // takes the donor's (the re-form re-shards from the epoch's start).
  const auto epoch = s.has("epoch") ? s.one("epoch") : batches->epoch();
  check(epoch >= 0 && epoch < (1 << 24), s.who + ": epoch " + std::to_string(epoch) + " in a donor's state");
  batches->seek(static_cast<int>(epoch), 0);
}

bool worker_core::reshard_among(int& seen, int generation, const std::vector<std::int64_t>& survivors) {
  const auto me = std::find(survivors.begin(), survivors.end(), static_cast<std::int64_t>(cfg.rank));
  if (me == survivors.end() || generation <= seen)
    return false;
  seen = generation;
  reshard(static_cast<int>(me - survivors.begin()), static_cast<int>(survivors.size()), generation);
  return true;
}

void worker_core::reshard(int pos, int world, int generation) {
  const int epoch = batches->epoch();
  batches = std::make_unique<models::batcher>(
    *cfg.data, models::shard_indices(*cfg.data, pos, world, cfg.seed, cfg.partition), cfg.batch_size,
    cfg.seed + static_cast<std::uint64_t>(pos) + 7777ULL * static_cast<std::uint64_t>(generation));
  batches->seek(epoch, 0);
  last_epoch_loss = models::recent_mean(static_cast<std::size_t>(std::max<std::int64_t>(1, batches->batches_per_epoch())));
}

void worker_core::restore(const snapshot& s) {
  adopt(s); // the replica, statistics, optimizer state and step
  const auto bs = s.one("batch_size");
  check(bs > 0 && bs <= batches->samples_per_epoch(), s.who + ": batch size " + std::to_string(bs) + " in the checkpoint");
  cfg.batch_size = static_cast<int>(bs);
  batches->set_batch_size(cfg.batch_size);
  const auto epoch = s.one("epoch");
  check(epoch >= 0 && epoch < (1 << 24), s.who + ": epoch " + std::to_string(epoch) + " in the checkpoint");
  batches->seek(static_cast<int>(epoch), s.one("position"));
  report.samples = s.one("samples");
}

void worker_core::apply_grad_weight() {
  trainer->set_loss_scale(cfg.ring.grad_weight);
  if (compute_trainer)
    compute_trainer->set_loss_scale(cfg.ring.grad_weight);
}

void worker_core::next_batch() {
  if (!batches->next_full(bt, &trainer->pool()))
    throw gradwire::error(who() + "its data shard holds no full batch of " + std::to_string(cfg.batch_size));
}

std::string worker_core::diverged(const models::nonfinite& e) const {
  return "diverged at step " + std::to_string(step + 1) + ": " + e.what();
}

bool worker_core::compute(caf::event_based_actor* self, const std::function<void(std::size_t)>& ready) {
  try {
    if (abortable && state_before.defined())
      kernels::copy(model->state(), state_before);
    compute_step(ready);
    contributed = true;
    return true;
  } catch (const models::step_aborted&) {
    abandon_step(self);
    return false;
  } catch (const models::nonfinite& e) {
    throw gradwire::error(who() + diverged(e));
  } catch (const gradwire::error& e) { // a model's own error (a torch module's traceback): say whose step
    const std::string what = e.what();
    if (what.rfind(who(), 0) == 0)
      throw;
    throw gradwire::error(who() + "step " + std::to_string(step + 1) + ": " + what);
  }
}

models::step_result worker_core::compute_step(const std::function<void(std::size_t)>& ready) {
  end_comm();
  const auto t0 = now(), wall0 = std::chrono::steady_clock::now();
  next_batch();
  models::step_result r;
  const auto key = models::dropout_key(cfg.seed, cfg.rank, step);
  if (cfg.faults.take_nan && cfg.faults.take_nan())
    (compute_model ? compute_trainer : trainer)->corrupt_next();
  if (compute_model) { // the batch runs on the device replica
    kernels::copy(model->params(), compute_model->params());
    compute_trainer->set_dropout_key(key);
    r = compute_trainer->compute_gradients(bt.x.data(), bt.y.data(), bt.size);
    kernels::copy(compute_trainer->gradients(), trainer->gradients());
    if (model->state().numel() > 0)
      kernels::copy(compute_model->state(), model->state());
    if (ready)
      ready(0); // every gradient is final at once
  } else {
    trainer->set_dropout_key(key);
    r = trainer->compute_gradients(bt.x.data(), bt.y.data(), bt.size, ready);
  }
  count_loss(r);
  take_time(t0, seconds_since(wall0));
  return r;
}

void worker_core::compute_offloaded(std::function<void()> then, std::function<void()> also) {
  end_comm();
  const auto t0 = now();
  next_batch();
  take_time(t0, 0); // the compute model's time; the simulation counts the real seconds where they run
  if (cfg.faults.take_nan && cfg.faults.take_nan())
    trainer->corrupt_next();
  offload([this, also = std::move(also), key = models::dropout_key(cfg.seed, cfg.rank, step)] {
      land_params();
      trainer->set_dropout_key(key);
      try {
        offloaded = trainer->compute_gradients(bt.x.data(), bt.y.data(), bt.size);
      } catch (const models::nonfinite& e) {
        throw gradwire::error(diverged(e)); // offload() names the worker
      }
      if (also)
        also();
    },
    [this, then = std::move(then)] {
      count_loss(offloaded);
      then();
    });
}

void worker_core::offload(std::function<void()> work, std::function<void()> then) {
  after_compute = std::move(then);
  offload_error.clear();
  cfg.vclock->offload([this, work = std::move(work)] {
    try {
      work();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      offload_error = what.rfind("diverged at step ", 0) == 0 ? what : "step " + std::to_string(step + 1) + ": " + what;
    }
  });
}

void worker_core::computed(caf::event_based_actor* self) {
  if (!after_compute)
    return; // nothing offloaded
  auto then = std::move(after_compute);
  after_compute = nullptr;
  if (!offload_error.empty()) {
    finish(self, who() + offload_error);
    return;
  }
  then();
}

void worker_core::count_loss(const models::step_result& r) {
  if (r.skipped && ++skipped_steps <= 10)
    log::warn("{}step {}: a NaN or infinite loss or gradient, skipped (train.on_nonfinite = \"skip\"){}", who(), step + 1,
              skipped_steps == 10 ? "; further skips are not logged" : "");
  last_epoch_loss.add(r.loss_sum, r.samples);
  window_loss += r.loss_sum;
  window_samples += r.samples;
  report.samples += r.samples;
}

void worker_core::take_time(clock_type::time_point t0, double real_seconds) {
  if (cfg.faults.in_step)
    cfg.faults.in_step();
  double extra = cfg.delay_ms * 1e-3;
  if (cfg.jitter_ms > 0)
    extra += std::uniform_real_distribution<double>(0, cfg.jitter_ms * 1e-3)(jitter_rng);
  if (cfg.vclock) { // the compute model's time, not the machine's; nothing sleeps
    const double slowdown = cfg.slowdown * (cfg.faults.slowdown_now ? cfg.faults.slowdown_now() : 1.0);
    const double in_batches = model_batch > 0 ? static_cast<double>(bt.size) / model_batch : 1.0;
    cfg.vclock->charge_compute(cfg.rank, step, slowdown * in_batches, extra, real_seconds);
  } else {
    // Of the time this worker ran, not the wall time: a stop of the job
    // mid-step (a suspend) is no computing, and multiplied by the slowdown
    // it would keep a slow worker asleep past the step timeout. A slow spell
    // slows only the work inside it, however large its factor.
    const double ran = ran_since(t0);
    double busy = cfg.slowdown * ran;
    if (cfg.faults.slow_spell)
      busy = cfg.faults.slow_spell(busy, since(t0));
    extra += std::max(0.0, busy - ran);
    if (extra > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(extra));
  }
  report.compute_seconds += since(t0);
  window.compute_ms += since(t0) * 1e3;
  phase = now();
  tr.span("compute", t0, phase, step);
}

void worker_core::end_comm() {
  const auto t = now();
  const double s = std::chrono::duration<double>(t - phase).count();
  report.comm_seconds += s;
  window.comm_ms += s * 1e3;
  if (s > 2e-6) // steps without an exchange (local SGD) leave no span
    tr.span("exchange", phase, t, step);
  phase = t;
}

void worker_core::add_compute(clock_type::time_point t0) {
  const auto t = now();
  const double s = std::chrono::duration<double>(t - t0).count();
  report.compute_seconds += s;
  window.compute_ms += s * 1e3;
  tr.span("apply", t0, t, step);
}

void worker_core::comm_to_compute(double seconds) {
  report.comm_seconds -= seconds;
  window.comm_ms -= seconds * 1e3;
  report.compute_seconds += seconds;
  window.compute_ms += seconds * 1e3;
}

void worker_core::add_wait(double seconds, bool span) {
  report.wait_seconds += seconds;
  window.wait_ms += seconds * 1e3;
  if (span && seconds > 0) {
    const auto t = now();
    tr.span("wait", t - std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds)), t, step);
  }
}

void worker_core::add_staleness(std::int64_t s) {
  report.staleness.push_back(s);
  window_staleness += static_cast<double>(s);
  ++window_pushes;
}

void worker_core::add_compression(const models::compress_energy& e) {
  report.compress_error_sum += e.ratio();
  ++report.compressed_steps;
  window_error += e.ratio();
  ++window_compressed;
}

std::int64_t worker_core::window_p99() const {
  // The window's pushes are the last window_pushes values of the report's.
  const auto n = static_cast<std::size_t>(std::min<std::int64_t>(window_pushes, report.staleness.size()));
  if (n == 0)
    return 0;
  std::vector<std::int64_t> w(report.staleness.end() - static_cast<std::ptrdiff_t>(n), report.staleness.end());
  const auto rank = (99 * n + 99) / 100 - 1; // nearest rank: ceil(0.99 n), 1-based
  std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(rank), w.end());
  return w[rank];
}

void worker_core::end_step(caf::event_based_actor* self) {
  report.step_compute_ms.push_back(static_cast<float>((report.compute_seconds - compute_at_step_start) * 1e3));
  compute_at_step_start = report.compute_seconds;
  contributed = false;
  ++step;
  ++window.steps;
  if (cfg.faults.after_step)
    cfg.faults.after_step(step);
  const bool asked = snapshot_steps.erase(step) > 0;
  if ((cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && step < cfg.steps) || asked)
    send_snapshot(self);
  if (cfg.vclock)
    cfg.vclock->note_progress(cfg.rank, report.samples);
  if (cfg.step_progress)
    self->send(as_coordinator(cfg.report_to), step_atom::value, cfg.rank, step, report.samples);
  if (cfg.eval_every > 0 && cfg.rank == 0 && step % cfg.eval_every == 0 && step < cfg.steps) {
    if (cfg.vclock)
      cfg.vclock->note_eval(step, since(start));
    land_params();
    self->send(as_coordinator(cfg.report_to), eval_atom::value, step, copy_of(model->params()), copy_of(model->state()));
  }
  if (window.steps < cfg.log_every && step < cfg.steps)
    return;
  auto& w = window;
  const auto n = static_cast<double>(w.steps);
  w.rank = cfg.rank;
  w.step = step;
  w.samples = report.samples;
  w.time = since(start);
  w.loss = window_samples ? window_loss / static_cast<double>(window_samples) : 0;
  w.compute_ms /= n;
  w.comm_ms /= n;
  w.wait_ms /= n;
  w.staleness = window_pushes ? window_staleness / static_cast<double>(window_pushes) : 0;
  w.staleness_p99 = window_p99();
  w.compress_error = window_compressed ? window_error / static_cast<double>(window_compressed) : -1;
  w.bytes_sent = report.bytes_sent;
  w.bytes_received = report.bytes_received;
  self->send(as_coordinator(cfg.report_to), metrics_atom::value, w);
  window = step_metrics{};
  window_loss = window_staleness = window_error = 0;
  window_samples = window_pushes = window_compressed = 0;
}

double worker_core::ran_since(clock_type::time_point t) const {
  return cfg.vclock ? since(t) : std::chrono::duration<double>(kernels::ran(t)).count();
}

bool worker_core::overdue(clock_type::time_point since) const {
  return cfg.vclock ? now() - since > cfg.request_timeout : kernels::waited_longer(since, cfg.request_timeout);
}

void worker_core::finish(caf::event_based_actor* self, std::string error, bool with_params) {
  if (finished)
    return; // (one report: the first reason stands)
  report.rank = cfg.rank;
  report.steps = step;
  report.seconds = since(start);
  report.last_loss = last_epoch_loss.mean();
  report.error = std::move(error);
  if (model)
    land_params();
  if (with_params && model)
    report.params = copy_of(model->params());
  if (model && model->state().numel() > 0) // the evaluation needs BatchNorm's statistics too
    report.state = copy_of(model->state());
  self->send(as_coordinator(cfg.report_to), done_atom::value, report);
  finished = true;
  self->quit();
}

} // namespace gradwire::actors
