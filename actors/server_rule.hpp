#pragma once
/// @file server_rule.hpp
/// What a parameter-server shard does with the workers' pushes: the
/// algorithm's part of a shard. ps_shard.cpp keeps the mechanics (ranges,
/// versions, clocks, replies, snapshots, records); a rule decides whether
/// a version's pushes are held and completed together (a round) or each
/// applied as it comes, how they become an update, and which state of its
/// own a checkpoint keeps. A shard holds one rule, which make_server_rule
/// (server_rules.cpp) chooses from the topology's options: the one place
/// that reads them.

#include "actors/messages.hpp"
#include "actors/shard_protocol.hpp"
#include "models/optimizer.hpp"

#include <cstdint>
#include <memory>
#include <optional>

namespace gradwire::actors {

struct shard_config;
struct snapshot;

namespace shard_detail {

struct shard_state;

class server_rule {
public:
  virtual ~server_rule() = default;
  /// For messages: "sync", "async", "local SGD", "DiLoCo", "async DiLoCo".
  virtual const char* name() const = 0;
  /// What the shard's optimizer applies: the run's (its decayed ranges in
  /// the whole buffer's indices), unless the rule has an outer optimizer.
  virtual models::optimizer_spec optimizer(const shard_config& cfg) const;
  /// True: a version completes once needed() pushes are held, in
  /// complete(); false: each push is applied as it comes, in apply_push().
  virtual bool rounds() const = 0;
  /// Rounds: the pushes that complete a version, of `live` workers.
  virtual int needed(int live) const { return live; }
  /// Rounds: the held pushes are summed weighted by their samples (else 1 each).
  virtual bool by_samples() const { return false; }
  /// Whether a push's staleness is counted in the shard's histogram.
  virtual bool counts_staleness() const { return true; }
  /// A push of `rank` made on `base_version`, before the shard takes it:
  /// nothing to take it, else the staleness to answer without taking it
  /// (-1: dropped, -2: after the last version).
  virtual std::optional<std::int64_t> screen(shard_state& st, int rank, std::int64_t base_version);
  /// Rounds: the version's pushes are in, summed in rank order in `sum`
  /// (`pushes` of them, `samples` behind them): update the parameters and
  /// move the version on.
  virtual void complete(shard_state& st, float* sum, int pushes, std::int64_t samples);
  /// Not rounds: applies the push of `rank` at `staleness`, at the lr
  /// times `lr_scale` (the worker's own), and moves the version on.
  virtual void apply_push(shard_state& st, int rank, std::int64_t staleness, const float* grad, float lr_scale);
  /// The shard itself, once, before its first message: a rule that talks
  /// to other actors (a tier of a hierarchy, halos_rule.hpp) keeps it to
  /// send requests, whose replies its handlers take in the shard.
  virtual void start(shard_actor::stateful_pointer<shard_state> self) { (void)self; }
  /// A pull by `rank` answered with `snap` (read-only from here on).
  virtual void answered(int rank, const slice& snap) { (void)rank, (void)snap; }
  /// The rule's own state in a checkpoint, and back (checked: restore
  /// throws naming `in.who` on a malformed one).
  virtual void save(snapshot& out) const { (void)out; }
  virtual void restore(const snapshot& in) { (void)in; }
};

/// DiLoCo's outer optimizer: SGD with Nesterov momentum on the pseudo-gradient.
models::optimizer_spec outer_optimizer(float lr, float momentum);

/// The rule of a shard of `cfg`, over `len` parameters starting as
/// `initial`: the wiring's own (cfg.make_rule), else the one the
/// parameter server's options name.
std::unique_ptr<server_rule> make_server_rule(const shard_config& cfg, std::size_t len, const slice& initial);
/// topology.ps.rule: the Python class cfg.ps names (python_rule.cpp),
/// cfg.python_rule when the wiring opened it.
std::unique_ptr<server_rule> make_python_rule(const shard_config& cfg, std::size_t len);

} // namespace shard_detail
} // namespace gradwire::actors
