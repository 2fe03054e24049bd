#pragma once
/// @file execution.hpp
/// Where a wiring's workers run, and how the wiring reaches them, in each
/// execution mode:
/// - in one process, every worker here (real time);
/// - in virtual time, every worker here, each placed on its simulated host;
/// - across processes, this process's one worker; the others through
///   proxies, and rank 0 coordinates.
/// A wiring written against it has no branch on the mode for its workers:
///
///     execution ex(sys, setup);
///     for (int r : ex.ranks())
///       ex.add_worker(r, spawn_my_worker(sys, config_of(r, ex.report_to())));
///     ex.wire([](caf::scoped_actor& self, const caf::actor& mine, const std::vector<caf::actor>& all) {
///       self->send(mine, actors::wire_atom::value, all);
///     });
///     auto c = ex.coordinate(on_progress, on_metrics, stop, checkpoints_of(setup));
///     if (!c) return {}; // a rank other than 0: its worker is done
///
/// The workers it was given are stopped when the run ends, or when the
/// wiring throws.

#include "scheduler/runtime/wiring.hpp"

#include <functional>
#include <optional>
#include <vector>

namespace gradwire::scheduler {

class execution {
public:
  /// `wire(self, mine, all)` starts worker `mine`, all[r] being worker r.
  using wire_fn = std::function<void(caf::scoped_actor&, const caf::actor& mine, const std::vector<caf::actor>& all)>;

  execution(caf::actor_system& sys, const topology_setup& setup);
  execution(const execution&) = delete;
  execution& operator=(const execution&) = delete;

  /// The ranks whose workers this process spawns: every rank, or its own.
  std::vector<int> ranks() const;
  /// Whom a worker reports to: the coordinator, or its proxy on rank 0.
  caf::actor report_to();
  /// Worker `rank`, spawned here: placed on its host (virtual time), or
  /// published for the other processes.
  void add_worker(int rank, const caf::actor& spawned);
  /// Every worker by rank, once ranks() are all added (across processes,
  /// proxies for the others').
  const std::vector<caf::actor>& workers();
  /// Starts each worker spawned here.
  void wire(const wire_fn& wire);
  /// Virtual time: a kill's survivors and these shards hear of it from the
  /// simulation (simulation::set_reform_targets). Elsewhere nothing.
  void tell_on_kill(std::vector<actors::shard_actor> shards = {});
  /// Coordinates the run: in this process, or on rank 0 across processes,
  /// returning what it came to; another rank waits for its worker to
  /// finish and returns nothing. `elastic` applies across processes and in
  /// one process's real time; `carry_on` across processes.
  std::optional<coordination> coordinate(const progress_fn& on_progress, const metrics_fn& on_metrics,
                                         const std::atomic<bool>* stop, const checkpoint_plan& checkpoints = {},
                                         const elastic_plan& elastic = {}, bool carry_on = false);

private:
  std::optional<coordination> coordinate_across(coordinator_options o, const elastic_plan& elastic);

  caf::actor_system& sys_;
  const topology_setup& setup_;
  caf::scoped_actor self_;
  stop_on_throw guard_;
  std::vector<caf::actor> mine_;    ///< spawned here
  std::vector<caf::actor> workers_; ///< by rank: the handles the others use
  bool complete_ = false;
};

} // namespace gradwire::scheduler
