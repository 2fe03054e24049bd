#pragma once
/// @file worker_round.hpp
/// The parameter-server worker's side of its server's rule (server_rule.hpp):
/// when a step pulls and pushes, what it pushes, which version it waits
/// for, and how far ahead of the slowest worker it may run. worker.cpp
/// keeps the mechanics (requests, replies, lost shards, offloading);
/// make_worker_round (worker_round.cpp) is its one reader of ps_options.

#include "actors/topology_options.hpp"

#include <cstdint>
#include <memory>

namespace gradwire::actors {

/// Where a worker stands: its step, the run's steps, and the round it is in.
struct round_clock {
  std::int64_t step = 0, steps = 0;
  std::int64_t round_start = 0, round_len = 0; ///< dynamic local steps: the round's first step and length
};

class worker_round {
public:
  virtual ~worker_round() = default;
  /// Steps of local training per exchange (0: every step pulls and pushes a gradient).
  virtual int local_steps() const { return 0; }
  /// Whether step c.step begins a round (pulls first) and ends one (pushes
  /// after); the run's last step ends a round.
  virtual bool begins(const round_clock& c) const;
  virtual bool ends(const round_clock& c) const;
  /// Whether a push is a pseudo-gradient (the parameters pulled at the
  /// round's start minus the replica's) rather than what was computed.
  virtual bool pushes_pseudo() const { return false; }
  /// The version of a shard to pull before step c.step, `last` the version
  /// this worker last had of it.
  virtual std::int64_t wanted_version(const round_clock& c, std::int64_t last) const;
  /// The clock every worker must have pushed before this step's pull (SSP: step - bound).
  virtual std::int64_t min_clock(const round_clock& c) const { (void)c; return 0; }
  /// Whether this step's push also brings the next step's parameters back.
  virtual bool push_pull(const round_clock& c) const { (void)c; return false; }
  /// Whether a round's end reports its pace to shard 0 for the next round's length.
  virtual bool sends_pace(const round_clock& c) const { (void)c; return false; }
  /// Whether the run ends when the shards reach cfg.steps versions (backup
  /// workers) rather than after this worker's own steps.
  virtual bool ends_by_versions() const { return false; }
};

/// The round of a worker of `ps`; `compressed`: compression.kind is on.
std::unique_ptr<worker_round> make_worker_round(const ps_options& ps, bool compressed);

} // namespace gradwire::actors
