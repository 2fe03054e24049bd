#pragma once
/// @file virtual_clock.hpp
/// Virtual time (experiment.clock = "virtual"): the same actors run under a
/// discrete-event scheduler (scheduler/runtime/virtual_time.hpp) that
/// delivers one message at a time in virtual-time order. Gradients are
/// computed for real; only time is modelled. An actor that reads the clock
/// (a worker timing its compute and exchange, a shard timing a held pull,
/// a trace span) reads this one instead of the machine's, and a worker's
/// computation costs what the compute model says, not what it took.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>

namespace gradwire::actors {

class virtual_clock {
public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~virtual_clock() = default;
  /// The running actor's time: when its message was delivered, plus what it
  /// has been charged since.
  virtual time_point now() const = 0;
  /// Worker `rank` has computed step `step` for real (in `real_seconds`):
  /// the compute model's seconds for it, times `slowdown`, plus
  /// `extra_seconds` (a node's delay and jitter). The running actor's
  /// clock moves on by them, and what it sends next leaves then.
  virtual double charge_compute(int rank, std::int64_t step, double slowdown, double extra_seconds,
                                double real_seconds) = 0;
  /// Worker 0 handed its replica of `step` to the evaluation at `seconds`
  /// (virtual, since the run began).
  virtual void note_eval(std::int64_t step, double seconds) = 0;
  /// An actor that worker `rank` spawned for itself (AD-PSGD's mixer),
  /// placed on its host: returns the handle others must use for it.
  virtual caf::actor place_beside(int rank, const caf::actor& spawned) = 0;
  /// The running actor spends `seconds` doing nothing another actor can
  /// see (a stalled worker, [[faults]] kind = "stall").
  virtual void charge(double seconds) = 0;
  /// The running actor (a parameter-server shard) has applied a gradient
  /// of `bytes`: it is charged what the model says that costs.
  virtual void charge_apply(std::int64_t bytes) = 0;
  /// Worker `rank` has finished a step, with `samples` trained so far (a
  /// shared budget is counted here, in virtual-time order).
  virtual void note_progress(int rank, std::int64_t samples) = 0;
  /// From a worker's handler, after charge_compute: `work` (its gradient)
  /// may run on another thread while other actors' events go on. The
  /// worker gets (computed_atom) when its clock reaches what it has been
  /// charged, before any other message, and `work` has run by then. Until
  /// then nothing else touches what `work` touches; it must not throw.
  virtual void offload(std::function<void()> work) = 0;
  /// From a killed worker's handler, as it ends: the survivors (and the
  /// parameter-server shards) are told (reform_atom, generation,
  /// survivors) at this virtual time, as the coordinator tells them in a
  /// real run, so that the same bits come on any thread count.
  virtual void lose_worker(int rank) = 0;
  /// From a worker's handler ([[faults]] delay, drop, partition): from the
  /// running actor's time, for `seconds`, messages from the actors of
  /// `rank`'s process to those of `peers`' arrive `delay_ms` later, or
  /// (down) not before the window ends; one actor's messages to another
  /// keep their order.
  virtual void impair_links(int rank, const std::vector<int>& peers, double seconds, double delay_ms, bool down) = 0;
  /// From worker `rank`'s handler ([[faults]] suspend): every actor on its
  /// host stops for `seconds` from now, as a host whose processes are
  /// stopped; what one was doing (a computation, a shard's update) ends
  /// that much later, and a message for one waits until the end.
  virtual void suspend_host(int rank, double seconds) = 0;
};

/// The clock's time, or the machine's when there is none.
inline std::chrono::steady_clock::time_point now_on(const virtual_clock* c) {
  return c ? c->now() : std::chrono::steady_clock::now();
}

} // namespace gradwire::actors
