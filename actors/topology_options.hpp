#pragma once
/// @file topology_options.hpp
/// One options struct per family of wirings, as the config's [topology]
/// gives them. Each reaches its actors whole: the application fills it
/// once (scheduler/app/wiring_setup.cpp), the runtime's wiring passes it
/// on in topology_setup, and the workers, shards and peers read it from
/// their own configs. What an option means for an actor is decided here,
/// beside the option, not in the wirings.

#include "models/compressed_gossip.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::actors {

/// Parameter server, local SGD and DiLoCo (the same wiring with shards
/// that average the pushed parameters).
struct ps_options {
  int shards = 1;
  bool sync = true;          ///< sync: every worker computes on the same version
  bool staleness_lr = false; ///< async: lr / max(1, staleness)
  int staleness_bound = -1;  ///< async: SSP bound s (< 0: none)
  int backup = 0;            ///< sync: backup workers b (pushes per version not waited for)
  float dc_lambda = 0.f;     ///< async: DC-ASGD lambda (0 = off)
  bool push_pull = true;     ///< async without a bound: push and the next pull in one request
  int local_steps = 0;       ///< > 0: local SGD, parameters averaged every local_steps steps
  /// DiLoCo (Douillard et al. 2023), local SGD whose shards apply the
  /// average as an outer step: the pseudo-gradient (global parameters
  /// minus the average) through SGD with Nesterov momentum. outer_lr 1
  /// and outer_momentum 0 is local SGD, to rounding. Not sync: async
  /// DiLoCo (Liu et al. 2024, without their delayed Nesterov): each
  /// worker pushes its own pseudo-gradient (the global parameters it
  /// pulled at its round's start minus its own at the round's end) when
  /// its round ends, and the shard applies it at once through the outer
  /// optimizer; staleness counts outer versions.
  bool outer = false;
  float outer_lr = 0.7f, outer_momentum = 0.9f;
  /// Async DiLoCo's delayed Nesterov (Liu et al. 2024), as forgather's
  /// async DiLoCo server applies it: of every outer_delay pushes, the
  /// first outer_delay - 1 are plain steps at outer_lr (the momentum left
  /// alone), and the last is the outer optimizer's Nesterov step on the
  /// mean of all outer_delay; 0 or 1: every push a Nesterov step.
  int outer_delay = 0;
  /// Async DiLoCo's dynamic local steps (DyLU, Liu et al. 2024): each
  /// worker's next round is H x (the fastest worker's seconds per inner
  /// step / its own), rounded, 1 to H, so that rounds take about the same
  /// wall time whatever the worker's speed. Shard 0 keeps the paces the
  /// workers report with their pushes and answers each worker's next
  /// round length (local_steps.hpp).
  bool dynamic_local_steps = false;
  /// topology.ps.rule (async): "FILE.py:Class", a server rule in Python
  /// (python_rule.cpp) in place of the built-in async rule: the file (an
  /// absolute path), the class, and the run's resolved config (TOML text)
  /// it is made with; no file: the built-in rules.
  std::string rule_file, rule_class, rule_config;
  bool python_rule() const { return !rule_file.empty(); }
  std::string rule() const { return rule_file + ":" + rule_class; }
  /// Across processes: shard i on rank i mod processes; false: all on rank 0.
  bool spread_shards = false;
  /// Streaming DiLoCo (Douillard et al. 2025; sync local SGD and DiLoCo):
  /// the parameters in `fragments` groups of whole tensors, each spread
  /// over shards / fragments shards (0: not streaming; 1: the whole
  /// model, DiLoCo's schedule).
  /// Fragment p is pushed every local_steps steps from step
  /// floor(local_steps / fragments x (p + 1)) on, so the exchanges are
  /// staggered; its new global values are pulled `sync_delay` steps after
  /// the push (the exchange overlaps that many inner steps) and merged as
  /// x = global + merge_alpha x (x - global) (0: the global values).
  int fragments = 0;
  int sync_delay = 0;
  float merge_alpha = 0.f;

  /// Async DiLoCo: shards that apply each worker's pseudo-gradient as it comes.
  bool outer_async() const { return local_steps > 0 && outer && !sync; }
  /// Async DiLoCo whose rounds follow the workers' speeds.
  bool dynamic() const { return outer_async() && dynamic_local_steps; }
  /// Shards that average each round's pushes (local SGD, sync DiLoCo).
  bool local_sgd() const { return local_steps > 0 && !outer_async(); }
  /// Shards with an outer optimizer (DiLoCo, sync or async).
  bool diloco() const { return local_steps > 0 && outer; }
  /// Async DiLoCo with delayed Nesterov in effect.
  bool delayed_nesterov() const { return outer_async() && outer_delay > 1; }
  /// Streaming: fragments exchanged on their own schedules, each exchange
  /// overlapping sync_delay inner steps.
  bool streaming() const { return local_sgd() && fragments >= 1; }
  /// Streaming: the step count (1-based) at which fragment p is first pushed.
  int fragment_offset(int p) const { return local_steps * (p + 1) / fragments; }
  /// Backup workers in effect (a sync parameter server, not local SGD).
  int backups() const { return sync && local_steps == 0 ? backup : 0; }
  /// DC-ASGD's lambda in effect (async parameter server only).
  float dc() const { return sync || local_steps > 0 ? 0.f : dc_lambda; }
  /// The async bound in effect (< 0: none).
  int bound() const { return sync || local_steps > 0 ? -1 : staleness_bound; }
  /// Workers push and pull in one round trip (async PS or async DiLoCo, no bound).
  bool uses_push_pull() const { return push_pull && !sync && !local_sgd() && staleness_bound < 0; }
};

/// How ring and hierarchical workers sum their buckets across processes
/// (topology.ring.allreduce): through the job's collective communicator, or
/// through ring peer actors; automatic picks per job (scheduler/app).
enum class allreduce_path { automatic, actors, collective };

/// Ring and hierarchical allreduce.
struct ring_options {
  allreduce_path path = allreduce_path::automatic;
  /// Gradient bucket size; 0: by path (bucket_floats_for).
  std::size_t bucket_floats = 0;
  std::size_t chunk_floats = 1 << 18;  ///< largest message
  bool overlap = false;                ///< start a bucket's allreduce during backward (peer actors)
  /// Every balance_every steps the split of the global batch follows the
  /// workers' measured speed (batch_balance.hpp); 0: fixed.
  int balance_every = 0;
  /// Flat ring without peers: each worker updates only the chunks it owns
  /// and the ring gathers parameters (the same model, bit for bit).
  bool sharded_update = true;
  /// transport.wire_dtype = "bf16" (flat ring, no peers, no sharded
  /// update): the chunks cross as bf16 (ring_allreduce::set_wire_bf16).
  bool wire_bf16 = false;
  int group_size = 2; ///< hierarchical only: workers per group (the last may be smaller)
  /// Hierarchical only: every worker's group, by rank (ring_peer.hpp's
  /// ring_groups: groups of any sizes, such as hosts); set, it replaces
  /// group_size's consecutive groups.
  std::vector<int> group_of;

  /// The ring of actors lends whole buckets by reference on a host, and
  /// each hop's message costs the same whatever its size: few large
  /// buckets (bench/RESULTS.md, "Bucket sizes by path").
  static constexpr std::size_t actors_bucket_floats = std::size_t{1} << 20; // 4 MiB
  /// Through the collective communicator buckets of this size sum faster
  /// than one large bucket (the same bench/RESULTS.md section): at 2 ranks
  /// each is one exchange (recursive doubling), and a large bucket summed
  /// by recursive doubling still ran slower.
  static constexpr std::size_t collective_bucket_floats = std::size_t{1} << 16; // 256 KiB
  /// The bucket size the ring runs with: bucket_floats when set, else the
  /// path's own (through the communicator or not).
  std::size_t bucket_floats_for(bool communicator) const {
    return bucket_floats > 0 ? bucket_floats : communicator ? collective_bucket_floats : actors_bucket_floats;
  }
};

enum class gossip_mode { dpsgd, adpsgd };

/// Gossip (D-PSGD, AD-PSGD).
struct gossip_options {
  gossip_mode mode = gossip_mode::dpsgd;
  /// "ring" | "torus" | "random" | "complete" | "exponential": the
  /// time-varying one-peer exponential graph (D-PSGD; a power of 2 of workers)
  std::string graph = "ring";
  int degree = 3;             ///< random graph: neighbours per worker (at least)
  /// D-PSGD on the random graph: nonzero, every step's graph is drawn
  /// anew from (graph_seed, step), the same on every worker
  /// (gossip_graph.hpp's graph_of_step); 0: one graph for the run.
  std::uint64_t graph_seed = 0;
  /// compression.kind on D-PSGD: CHOCO-SGD's estimates, or naive
  /// compressed gossip (models/compressed_gossip.hpp), and the consensus
  /// step gamma both take (0: models::consensus_step of the mode).
  models::gossip_rule rule = models::gossip_rule::choco;
  float consensus_lr = 0.f;
};

/// HALoS (Kim et al., ICML 2025), hierarchical asynchronous local SGD.
/// The workers of each group (topology.group_size; 0: by host) take
/// topology.local_steps steps and push their pseudo-gradient to their
/// group's local server, which applies each as it comes through its own
/// Nesterov step (local_lr, local_momentum) and answers with its
/// parameters. Every exchange_every of those pushes a local server sends
/// its progress since its last merge to the global server, which applies
/// it as async DiLoCo does (global_lr, global_momentum), and goes on
/// serving its workers meanwhile; the answer is merged as
/// local += merge_alpha x (global - local at the send), so the progress
/// made during the exchange is kept (halos_rule.hpp).
struct halos_options {
  /// A local server's step is 1 / (workers per group) of a push at
  /// local_lr 0.25 with 4 workers a group: their average, a push at a
  /// time. Momentum on stale pseudo-gradients needs a smaller lr; the
  /// global server's, on K pushes' progress, is tamer (the defaults: the
  /// best of a small grid on study-halos.toml's MLP, docs/halos.md).
  float local_lr = 0.25f, local_momentum = 0.f;
  float global_lr = 0.25f, global_momentum = 0.5f;
  int exchange_every = 4;
  float merge_alpha = 1.f;
};

/// Every family's options, one member each: the config (run_config) and
/// the runtime's topology_setup both extend it, so a new family's options
/// are one struct above and one member here, and reach the wiring whole.
struct family_options {
  ps_options ps;
  ring_options ring;
  gossip_options gossip;
  halos_options halos;
};

} // namespace gradwire::actors
