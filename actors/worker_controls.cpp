/// @file worker_controls.cpp
/// A worker's side of its coordinator's controls (worker_core.hpp): holding
/// at a step, pauses, running to a last step, snapshots at a step, the
/// heartbeats that say it is alive, and its death when a fault kills it in
/// virtual time.

#include "actors/worker_core.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/coordinator_protocol.hpp"
#include "kernels/log.hpp"

#include <algorithm>

namespace gradwire::actors {

bool worker_core::hold(caf::event_based_actor* self) {
  if (cfg.faults.killed)
    if (const auto why = cfg.faults.killed(); !why.empty()) {
      die(self, why);
      return held = true;
    }
  const bool was = held;
  const bool waits = wait_at >= 0 && step >= wait_at;
  held = (hold_at >= 0 && step >= hold_at) || waits;
  if (waits && !was && cfg.ring.reform_to) // the reformer lets the worker back in once every survivor waits here
    self->send(as_reformer(cfg.ring.reform_to), paused_atom::value, cfg.rank, step);
  return held;
}

void worker_core::die(caf::event_based_actor* self, const std::string& why) {
  if (finished)
    return;
  worker_report lost;
  lost.rank = cfg.rank;
  lost.steps = step;
  lost.samples = report.samples;
  lost.seconds = since(start);
  lost.error = who() + why;
  self->send(as_coordinator(cfg.report_to), lost_atom::value, lost);
  if (cfg.vclock)
    cfg.vclock->lose_worker(cfg.rank);
  finished = true;
  self->quit(caf::exit_reason::kill);
}

void worker_core::on_pause(caf::event_based_actor* self) {
  if (hold_at < 0) // the step it may be in, at most; at a stop, one whose batch has not run is given up
    hold_at = stopping() && !contributed ? step : step + 1;
  self->send(as_coordinator(cfg.report_to), paused_atom::value, cfg.rank, hold_at);
}

void worker_core::arm_stop() {
  abortable = cfg.stop != nullptr && !offloads() && !compute_model && !cfg.ring.overlap;
  if (!abortable)
    return;
  trainer->abort_on(cfg.stop);
  if (model->state().numel() > 0)
    state_before = kernels::tensor::empty(model->state().shape(), model->dev());
}

void worker_core::disarm_stop() {
  if (abortable)
    trainer->abort_on(nullptr);
  abortable = false;
}

void worker_core::abandon_step(caf::event_based_actor* self) {
  if (state_before.defined())
    kernels::copy(state_before, model->state());
  batches->put_back(bt.size);
  log::info("{}stopped in the middle of step {}: it holds after step {}", who(), step + 1, step);
  if (step >= cfg.steps) { // the stop's run_to(step) came while it waited for this step's input: it ends here
    disarm_stop();
    self->send(as_worker(self), tick_atom::value);
    return;
  }
  hold_at = step;
  held = true; // the stop's pause finds it here; run_to's tick resumes it
}

void worker_core::on_run_to(caf::event_based_actor* self, std::int64_t last) {
  if (last < step) // past it already: the coordinator's plan cannot hold (it will time out)
    return;
  if (last > step)
    disarm_stop(); // every worker must reach `last`: a peer may wait for this one's step there
  cfg.steps = std::min(cfg.steps, last);
  snapshot_steps.erase(snapshot_steps.upper_bound(cfg.steps), snapshot_steps.end()); // past the end: never reached
  hold_at = -1;
  // Already at the last step (held there, or between its end and the next
  // step's begin, as when the pause reaches every worker of a lock-step
  // job in the same round): that boundary has passed, its snapshot goes now.
  if (step == cfg.steps)
    send_snapshot(self);
  else
    snapshot_steps.insert(cfg.steps);
  if (held) {
    held = false;
    self->send(as_worker(self), tick_atom::value);
  }
}

void worker_core::on_snapshot_at(caf::event_based_actor* self, std::int64_t at) {
  if (at == step) // held right at S (or between its end and the next step): its boundary has passed
    send_snapshot(self);
  else if (at > step)
    snapshot_steps.insert(at); // beside any earlier one not reached yet
  hold_at = -1;
  if (held) {
    held = false;
    self->send(as_worker(self), tick_atom::value);
  }
}

void worker_core::start_heartbeats(caf::event_based_actor* self) {
  self->delayed_send(as_worker(self), cfg.beat_interval, beat_atom::value);
}

bool worker_core::on_beat(caf::event_based_actor* self) {
  if (after_compute) { // the simulation hands (computed_atom) over first: this is its bug
    finish(self, who() + "a heartbeat came in while its gradient was being computed");
    return false;
  }
  if (!cfg.vclock)
    while (!finished && requests.expire_one(cfg.request_timeout)) {
    }
  if (finished)
    return false;
  self->send(as_coordinator(cfg.report_to), step_atom::value, cfg.rank, step, report.samples);
  self->delayed_send(as_worker(self), cfg.beat_interval, beat_atom::value);
  return true;
}

} // namespace gradwire::actors
