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
///     ex.wire([](caf::scoped_actor& self, int r, const std::vector<caf::actor>& all) {
///       self->send(all[r], actors::wire_atom::value, all);
///     });
///     auto c = ex.coordinate(on_progress, on_metrics, stop, checkpoints_of(setup));
///     ex.finish();
///     if (!c) return {}; // a rank other than 0: its worker is done
///
/// Actors beside the workers (a ring peer) are added by slot and reached
/// by rank and slot (`add_actor`, `actor_of`). `finish()` ends every
/// actor it was given (in virtual time, every placed actor); a wiring
/// that throws has them stopped.

#include "scheduler/runtime/wiring.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace gradwire::scheduler {

class execution {
public:
  /// `wire(self, r, all)` starts worker r (spawned here), all[r] being worker r.
  using wire_fn = std::function<void(caf::scoped_actor&, int r, const std::vector<caf::actor>& all)>;

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
  /// Rank `rank`'s actor in `slot` (transport::slots), spawned here:
  /// placed on that worker's host (virtual time), or published. Returns
  /// the handle the others use.
  caf::actor add_actor(int rank, std::uint32_t slot, const caf::actor& spawned);
  /// Rank `rank`'s actor in `slot`: added here, or a proxy for another
  /// process's; null for a rank below 0.
  caf::actor actor_of(int rank, std::uint32_t slot);
  /// Ends the actors given to it, once the wiring has what it needs of
  /// them (a parameter server's shards are read after the coordination).
  void finish();
  caf::scoped_actor& self() { return self_; }
  /// Starts each worker spawned here.
  void wire(const wire_fn& wire);
  /// Virtual time: a kill's survivors and these shards hear of it from the
  /// simulation (simulation::set_reform_targets). Elsewhere nothing.
  void tell_on_kill(std::vector<actors::shard_actor> shards = {});
  /// Coordinates the run: in this process, or on rank 0 across processes,
  /// returning what it came to; another rank waits for its worker to
  /// finish and returns nothing. In virtual time the loop has stopped when
  /// it returns. `elastic` applies across processes and in
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
  std::map<std::pair<int, std::uint32_t>, caf::actor> others_; ///< add_actor's, by (rank, slot): handles
  std::vector<caf::actor> others_mine_;                       ///< add_actor's, as spawned
};

} // namespace gradwire::scheduler
