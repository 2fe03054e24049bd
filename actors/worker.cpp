#include "actors/worker.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "models/batcher.hpp"
#include "models/model.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>

namespace gradwire::actors {
namespace {

using clock_type = std::chrono::steady_clock;

struct worker_state {
  worker_config cfg;
  std::unique_ptr<models::model> model;
  std::unique_ptr<models::trainer> trainer;
  std::unique_ptr<models::batcher> batches;
  models::batch bt;
  std::int64_t step = 0;
  std::size_t pending = 0;
  std::vector<std::int64_t> base_version;
  worker_report report;
  clock_type::time_point start, phase;
  double loss_sum = 0;
  std::int64_t loss_samples = 0;
  step_metrics window; ///< accumulating towards the next metrics record
  double window_loss = 0, window_staleness = 0;
  std::int64_t window_samples = 0, window_pushes = 0;
  static inline const char* name = "worker";
};

using worker_actor = caf::stateful_actor<worker_state>;

double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

void finish(worker_actor* self, std::string error = {}) {
  auto& st = self->state;
  st.report.rank = st.cfg.rank;
  st.report.steps = st.step;
  st.report.seconds = since(st.start);
  st.report.last_loss = st.loss_samples ? st.loss_sum / static_cast<double>(st.loss_samples) : 0;
  st.report.error = std::move(error);
  self->send(st.cfg.report_to, done_atom::value, st.report);
  self->quit();
}

/// Next full batch; partial batches at the end of an epoch are skipped so
/// that every step of every worker has the same size.
void next_batch(worker_state& st) {
  for (int tries = 0; tries < 3; ++tries)
    if (st.batches->next(st.bt) && st.bt.size == st.cfg.batch_size)
      return;
  throw gradwire::error("worker " + std::to_string(st.cfg.rank) + ": its data shard holds no full batch of " +
              std::to_string(st.cfg.batch_size));
}

void begin_step(worker_actor* self);

/// Counts a finished step; every log_every steps sends the window's record.
void end_step(worker_actor* self) {
  auto& st = self->state;
  ++st.step;
  ++st.window.steps;
  if (st.window.steps < st.cfg.log_every && st.step < st.cfg.steps)
    return;
  auto& w = st.window;
  w.rank = st.cfg.rank;
  w.step = st.step;
  w.samples = st.report.samples;
  w.time = since(st.start);
  w.loss = st.window_samples ? st.window_loss / static_cast<double>(st.window_samples) : 0;
  w.compute_ms /= static_cast<double>(w.steps);
  w.comm_ms /= static_cast<double>(w.steps);
  w.staleness = st.window_pushes ? st.window_staleness / static_cast<double>(st.window_pushes) : 0;
  self->send(st.cfg.report_to, metrics_atom::value, w);
  st.window = step_metrics{};
  st.window_loss = st.window_staleness = 0;
  st.window_samples = st.window_pushes = 0;
}

void compute_and_push(worker_actor* self) {
  auto& st = self->state;
  st.report.comm_seconds += since(st.phase);
  st.window.comm_ms += since(st.phase) * 1e3;
  const auto t0 = clock_type::now();
  try {
    next_batch(st);
  } catch (const gradwire::error& ex) {
    finish(self, ex.what());
    return;
  }
  auto r = st.trainer->compute_gradients(st.bt.x.data(), st.bt.y.data(), st.bt.size);
  st.loss_sum += r.loss_sum;
  st.loss_samples += r.samples;
  st.window_loss += r.loss_sum;
  st.window_samples += r.samples;
  st.report.samples += r.samples;
  if (st.cfg.local_steps > 0)
    st.trainer->apply();
  const float* g = st.cfg.local_steps > 0 ? st.model->params().data() : st.trainer->gradients().data();
  if (st.cfg.slowdown > 1.0)
    std::this_thread::sleep_for(std::chrono::duration<double>((st.cfg.slowdown - 1.0) * since(t0)));
  st.report.compute_seconds += since(t0);
  st.window.compute_ms += since(t0) * 1e3;
  if (st.cfg.local_steps > 0 && (st.step + 1) % st.cfg.local_steps != 0 && st.step + 1 < st.cfg.steps) {
    end_step(self); // a local step: no exchange
    self->send(self, step_atom::value);
    return;
  }
  st.phase = clock_type::now();
  st.pending = st.cfg.shards.size();
  for (std::size_t i = 0; i < st.cfg.shards.size(); ++i) {
    const auto [b, e] = st.cfg.ranges[i];
    auto grad = slice::empty({static_cast<std::int64_t>(e - b)}); // handed over, never written again
    std::memcpy(grad.data(), g + b, (e - b) * sizeof(float));
    self->request(st.cfg.shards[i], st.cfg.timeout, push_atom::value, st.cfg.rank, st.base_version[i], st.step,
                  static_cast<std::int64_t>(st.bt.size), grad)
      .then(
        [=](std::int64_t staleness, std::int64_t) {
          auto& s = self->state;
          s.report.staleness.push_back(staleness);
          s.window_staleness += static_cast<double>(staleness);
          ++s.window_pushes;
          if (--s.pending == 0) {
            end_step(self);
            begin_step(self);
          }
        },
        [=](caf::error& err) {
          finish(self, "worker " + std::to_string(self->state.cfg.rank) + ": push to shard " +
                         std::to_string(i) + " failed: " + self->system().render(err));
        });
  }
}

void begin_step(worker_actor* self) {
  auto& st = self->state;
  if (st.step >= st.cfg.steps) {
    finish(self);
    return;
  }
  if (st.cfg.local_steps > 0 && st.step % st.cfg.local_steps != 0) {
    st.phase = clock_type::now(); // no communication in this step
    compute_and_push(self);       // inside a round: keep training the local replica
    return;
  }
  st.phase = clock_type::now();
  st.pending = st.cfg.shards.size();
  const std::int64_t want = st.cfg.local_steps > 0 ? st.step / st.cfg.local_steps
                            : st.cfg.sync          ? st.step
                                                   : 0;
  const std::int64_t min_clock =
    !st.cfg.sync && st.cfg.local_steps == 0 && st.cfg.staleness_bound >= 0 ? st.step - st.cfg.staleness_bound : 0;
  for (std::size_t i = 0; i < st.cfg.shards.size(); ++i) {
    self->request(st.cfg.shards[i], st.cfg.timeout, pull_atom::value, want, min_clock)
      .then(
        [=](std::int64_t version, slice params) {
          auto& s = self->state;
          const auto [b, e] = s.cfg.ranges[i];
          std::memcpy(s.model->params().data() + b, params.data(), (e - b) * sizeof(float));
          s.base_version[i] = version;
          if (--s.pending == 0)
            compute_and_push(self);
        },
        [=](caf::error& err) {
          finish(self, "worker " + std::to_string(self->state.cfg.rank) + ": no parameters from shard " +
                         std::to_string(i) + " (" + self->system().render(err) + ")");
        });
  }
}

caf::behavior worker_behavior(worker_actor* self, worker_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.start = clock_type::now();
  st.base_version.assign(st.cfg.shards.size(), 0);
  try {
    st.model = std::make_unique<models::model>(st.cfg.spec, kernels::device::cpu(), st.cfg.seed);
    st.trainer = std::make_unique<models::trainer>(*st.model, st.cfg.opt, st.cfg.threads, st.cfg.how);
    st.batches = std::make_unique<models::batcher>(
      *st.cfg.data, models::shard_indices(st.cfg.data->size(), st.cfg.rank, st.cfg.world, st.cfg.seed),
      st.cfg.batch_size, st.cfg.seed + static_cast<std::uint64_t>(st.cfg.rank));
  } catch (const std::exception& e) {
    finish(self, "worker " + std::to_string(st.cfg.rank) + ": " + e.what());
    return {};
  }
  // Heartbeats come from a timer, so a worker waiting for a reply keeps
  // sending them; only one stuck inside a computation falls silent. The
  // interval is well under the coordinator's silence limit (timeout / 2).
  const auto beat = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(500), st.cfg.timeout / 8);
  self->send(self, step_atom::value);
  self->delayed_send(self, beat, beat_atom::value);
  return {
    [=](step_atom) { begin_step(self); },
    [=](beat_atom) {
      auto& s = self->state;
      self->send(s.cfg.report_to, step_atom::value, s.cfg.rank, s.step, s.report.samples);
      self->delayed_send(self, beat, beat_atom::value);
    },
  };
}

} // namespace

caf::actor spawn_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn<caf::detached>(worker_behavior, std::move(cfg));
}

} // namespace gradwire::actors
