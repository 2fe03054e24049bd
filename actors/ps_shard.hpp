#pragma once
/// @file ps_shard.hpp
/// A parameter-server shard: owns the range [begin, end) of the model's
/// parameter buffer and the optimizer state for it. What follows is what
/// its rules do with the pushes (server_rule.hpp, one class each in
/// server_rules.cpp); the shard keeps the mechanics.
///
/// sync:  gradients of a version are summed, weighted by each push's sample
///        count, until all `workers` have pushed; the mean over all their
///        samples is applied once and the version advances (workers of
///        different batch sizes together equal one batch of all samples).
///        A pull for a version not reached yet is answered when it is.
/// async: each push is applied at once; its staleness (the shard's version
///        when applied minus the version the worker read) is recorded and
///        optionally divides the learning rate (staleness-aware lr).
/// backup workers (sync, backup > 0): the first workers - backup pushes
///        computed on the current version are applied; later pushes for an
///        old version are dropped (replied with staleness -1) and counted
///        per rank. A pull is answered with the newest version it allows.
/// dc-asgd (async, dc_lambda > 0): each gradient is corrected for its delay,
///        g + lambda * g * g * (w_now - w_read), w_read being the slice the
///        pushing worker last pulled (a copy per worker).
/// record (async): the shard writes the order of its updates
///        (update_record.hpp); replay: it takes them in a record's order.
/// pushpull (async only): a push whose reply also carries the slice after
///        it, as a pull right then would (one round trip a step).
/// ssp:   async, and a pull with min_clock waits until every worker has
///        pushed min_clock steps (the worker's clock - bound): the fastest
///        worker is never more than bound + 1 steps ahead of the slowest.
/// average (local SGD): pushes carry parameters, not gradients; once all
///        workers have pushed, the shard's slice becomes their mean and
///        the version advances. No optimizer runs here.

#include "actors/messages.hpp"
#include "actors/shard_protocol.hpp"
#include "actors/snapshot.hpp"
#include "actors/topology_options.hpp"
#include "actors/trace.hpp"
#include "actors/update_record.hpp"
#include "actors/virtual_clock.hpp"
#include "models/compress.hpp"
#include "models/optimizer.hpp"
#include "models/torch_module.hpp"

#include <caf/all.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace gradwire::actors {

namespace shard_detail {
class server_rule;
}

struct shard_config {
  int id = 0;
  std::size_t begin = 0, end = 0; ///< range in the model's parameter buffer
  int workers = 1;
  /// The parameter server's options, whole: sync, staleness_lr, backups(),
  /// dc() (DC-ASGD), local_sgd() (average pushed parameters).
  ps_options ps;
  /// Backup workers: the version the run ends at; pushes after it are ignored
  /// (workers finish on seeing it from every shard, not all at once).
  std::int64_t last_version = 0;
  models::optimizer_spec opt;
  /// compression.kind: the workers push compressed payloads (bf16, topk,
  /// randk, sign, int8; models/compress.hpp), which the shard decodes before it
  /// takes them. On local-SGD and DiLoCo shards a compressed push is a
  /// pseudo-gradient (the parameters pulled at the round's start minus the
  /// worker's own), averaged and applied as an outer step.
  models::compress_spec compress;
  /// topology.ps.rule (ps_options::rule): this shard's instance of the Python
  /// class, opened where the shard is spawned so that a bad rule is the
  /// run's error; null: opened by the shard.
  std::shared_ptr<models::torch_module::rule> python_rule;
  /// A family's own rule (HALoS's local servers, halos_rule.hpp), made for
  /// this shard's `len` parameters starting as `initial`; unset: the rule
  /// `ps` names (make_server_rule).
  std::function<std::unique_ptr<shard_detail::server_rule>(std::size_t len, const slice& initial)> make_rule;
  /// Async: each worker's pushes are applied at lr x its entry ([[nodes]]
  /// lr_scale); empty: 1 for all.
  std::vector<double> worker_lr_scale;
  std::shared_ptr<tracer> trace; ///< track "shard <id>": push (arg rank), apply (arg version)
  /// Checkpoints of a lock-step shard (sync, local SGD): it keeps a copy of
  /// itself at every version that is a multiple of this (the last two),
  /// for (snapshot_atom, version) to take; 0: none kept (an async shard
  /// answers (snapshot_atom, -1) with its state as it is).
  std::int64_t snapshot_every_versions = 0;
  /// Resume: the shard starts from this snapshot (version, slice,
  /// optimizer state, clocks, staleness so far) instead of `initial`.
  std::shared_ptr<const snapshot> resume;
  /// A shard rebuilt on rank 0 after its rank was lost (async): it starts
  /// at this version, with these clocks (steps pushed per worker) and live
  /// workers, its optimizer state afresh. Empty clocks: a shard as usual.
  std::int64_t first_version = 0;
  std::vector<std::int64_t> first_clocks;
  std::vector<bool> first_live;
  /// Virtual time (virtual_clock.hpp): a held pull's wait and the trace on
  /// the simulation's clock. Null: the machine's.
  std::shared_ptr<virtual_clock> vclock;
  /// experiment.record (async shards): the file this shard writes its
  /// record to (update_record.hpp; "": none), and its bound in bytes.
  std::string record_path;
  std::int64_t record_max_bytes = 0;
  std::string record_run; ///< the run's id, in the record's header
  /// gradwire replay: this shard takes its pushes and answers its pulls in
  /// the record's order, each held until its entry is due (null: as they come).
  std::shared_ptr<const shard_record> replay;
};

/// Spawns a shard starting from `initial` (a host slice of end - begin floats).
/// topology.ps.rule: a new instance of the Python class cfg.ps names,
/// for shard_config::python_rule (throws gradwire::error naming it).
std::shared_ptr<models::torch_module::rule> open_python_rule(const shard_config& cfg);

shard_actor spawn_ps_shard(caf::actor_system& sys, const shard_config& cfg, slice initial);

} // namespace gradwire::actors
