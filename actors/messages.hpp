#pragma once
/// @file messages.hpp
/// The message vocabulary between gradwire's actors (docs/architecture.md
/// describes how the wirings use it). Tensor payloads are kernels::tensor
/// values: reference-counted views, so a message carries a pointer, never
/// a copy of the floats. A sender hands over a tensor it will not write
/// again (a fresh snapshot or gradient buffer); the transport layer encodes
/// these at process boundaries.
///
/// "By ref": the message's tensor may travel between processes on one node
/// as a read-only view of the sender's shared memory (transport.shm_refs)
/// instead of a copy: the sender never writes it again while the receiver
/// may read it, and the receiver only reads it. This column is the
/// `message_table` below, which the transport reads; replies always may
/// (every reply of the vocabulary carries a snapshot).
///
/// | message | from -> to | payload | reply | by ref |
/// |---|---|---|---|---|
/// | pull   | worker -> shard | rank, min_version, min_clock (answered once the slowest worker's clock reaches it: SSP) | (version, parameter slice, seconds the pull was held) | |
/// | push   | worker -> shard | rank, base_version, step (the worker's clock), samples, gradient slice (mean over samples) | (staleness; -1 when dropped, -2 after the last version; version) | yes: a fresh gradient |
/// | pushpull | worker -> async shard | as push | (staleness, version, parameter slice after this push): push and the next pull in one round trip (ps-lite's ZPushPull) | yes: as push |
/// | pace   | async DiLoCo worker -> shard 0 | rank, step of its push, its seconds per inner step over the round (topology.diloco.dynamic_local_steps) | (steps in its next round) | |
/// | stats  | anyone -> shard | | (version, staleness histogram, largest clock gap seen, pushes dropped per rank) | |
/// | fetch  | anyone -> shard | | (version, parameter slice) | |
/// | step   | worker -> coordinator | rank, steps done, samples done (heartbeat, ~2/s) | | |
/// | metrics| worker -> coordinator | step_metrics (every log_every steps) | | |
/// | done   | worker -> coordinator | worker_report | | |
/// | eval   | worker 0 -> coordinator | step, parameters, BatchNorm statistics | | |
/// | wire   | topology -> ring, compressing ring or gossip worker, or virtual time's reformer | the workers it reaches (a ring worker: its right neighbour first) | | |
/// | peerwire | topology -> ring peer | right neighbour, its group leader's right (hierarchical), its group's peers | | |
/// | reduce | worker -> ring peer | round, bucket, gradient view (handed over until reduced) | (reduced, round, bucket, pieces, wait s), or (redfailed, round, error) | |
/// | reduced | ring or collective peer -> worker; hierarchical leader -> its group's peers | round, bucket, the reduced pieces, seconds waited | | |
/// | redfailed | ring or collective peer -> worker | round, error text: the bucket's reduce failed | | |
/// | ring   | ring peer -> right neighbour | round, bucket, chunk, hop, partial sum or final chunk | | yes: the ring's rounds keep the sender off it |
/// | gossip | D-PSGD worker -> neighbour | step, rank, parameter snapshot | | yes: a fresh snapshot |
/// | mixer  | AD-PSGD worker -> neighbour | rank, its mixer's handle: average with it there | | |
/// | average | AD-PSGD worker -> neighbour's mixer | rank, step, parameter snapshot | the neighbour's parameters before the average | yes: a fresh snapshot |
/// | turn   | a gossip store -> worker or mixer | none: in a replay, the event it waits for is due (gossip_mixer.hpp) | | |
/// | gather | compressing ring worker -> every other one | step, phase (PowerSGD: 0 for P, 1 for Q), rank, compressed payload (models/compress.hpp) | | yes: a fresh payload |
/// | balance| ring worker -> every ring worker | round (step), rank, compute s, fixed s, samples, steps of its last window | | |
/// | beat   | worker -> itself | (a timer: time to send step) | | |
/// | stop | coordinator -> worker | none: finish at the next step boundary and report | | |
/// | done | worker -> coordinator | worker_report: it finished (or failed) | | |
/// | lost | any rank -> coordinator; virtual time's loop -> its reformer | worker_report of another rank, with the error: that worker is lost | | |
/// | tick | worker -> itself | none: begin the next step (lets other mail in between steps) | | |
/// | pause | coordinator -> worker | none: hold at the next step boundary | (paused, rank, the boundary it holds at) to the coordinator | |
/// | paused | worker -> coordinator | rank, the step boundary it holds at | | |
/// | run_to | coordinator -> worker | step: run to it, snapshot, finish (a stop that keeps a checkpoint) | | |
/// | snap_at | coordinator -> worker | step: after a pause, run to it and snapshot there (a checkpoint by time) | | |
/// | snapshot | coordinator -> shard | version (-1: as it is) | (meta, floats): its part of a checkpoint | |
/// | replica | coordinator -> PS worker | a generation: send its state to report_to (the replica lost shards are rebuilt from) | (repstate, meta, floats) to report_to | |
/// | repstate | PS worker -> coordinator | meta text, floats (actors/snapshot.hpp): its replica, asked for by replica, to rebuild lost shards from | | |
/// | give | coordinator or reformer -> ring worker | generation, a survivor behind: send it this worker's state (donor), straight | | |
/// | adopted | ring worker -> coordinator or reformer | rank, generation: it has taken a donor's state and is at the re-form's step | | |
/// | snapshot | worker, shard -> coordinator | meta text, floats (actors/snapshot.hpp): a checkpoint's part | | |
/// | donor | donor ring worker -> ring worker behind (give) | meta text, floats (actors/snapshot.hpp's layout): the donor's state to adopt | | |
/// | pin | coordinator -> shard | version: keep a copy of it (a checkpoint by time will ask for it) | | |
/// | abandon | coordinator (virtual time: its reformer) -> ring worker | generation: a peer is lost, abandon the round in flight | (abandoned, rank, steps done, whether a round was abandoned) to whoever runs the re-form | |
/// | abandoned | ring worker -> coordinator or reformer | rank, steps done, whether a round was abandoned | | |
/// | rewire | coordinator (virtual time: its reformer) -> ring worker | generation, survivors' ranks, right neighbour: go on as a ring of the survivors | | |
/// | reform | coordinator -> shard, PS or gossip worker | generation, survivors' ranks: go on without the lost | | |
/// | hold_at | coordinator -> ring worker | step: hold once that many steps are done, for a lost worker coming back ([[faults]] back_at_step), until the next re-form | | |
/// | knock | transport -> coordinator | rank: a lost worker's process asks to come back | | |
/// | paused | ring worker -> virtual time's reformer | rank, step: it holds there ([[faults]] back_at_step) for a worker coming back | | |
/// | reformed | virtual time's reformer -> coordinator | lost rank, step the ring goes on from, whether a round was lost, virtual seconds, workers after: the fault's recovery | | |
/// | rejoined | virtual time's reformer -> coordinator | rank, step, virtual seconds: a lost worker's replacement is back in the ring | | |
/// | rebuilt | coordinator -> async PS worker | shard index, shard: that shard was rebuilt on rank 0, its rank lost | | |
/// | barrier, release, recheck, missing | ranks -> rank 0's barrier actor and back | the job's barrier (actors/barrier.hpp) | | |
/// | computed | virtual time's loop -> worker | its offloaded gradient is done and its compute time is up (virtual_clock::offload) | | |
///
/// One atom, one meaning: what a message asks is never chosen by a flag or
/// by an integer's width. Every actor refuses a message it has no handler
/// for, and logs it (refuse_unexpected). Every receiver's messages are
/// also a typed interface, which the compiler checks at every sender: the
/// shard's (shard_protocol.hpp), the allreduce peers' (reduce_protocol.hpp),
/// the barrier's root (barrier.hpp), AD-PSGD's mixer (gossip_mixer.hpp),
/// each worker family's (worker_protocol.hpp), the coordinator's and a
/// ring reformer's (coordinator_protocol.hpp), and virtual time's reformer
/// (scheduler/runtime/virtual_reform.hpp).

#include "kernels/tensor.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <vector>

namespace gradwire::actors {

using pull_atom = caf::atom_constant<caf::atom("pull")>;
using push_atom = caf::atom_constant<caf::atom("push")>;
using push_pull_atom = caf::atom_constant<caf::atom("pushpull")>;
using pace_atom = caf::atom_constant<caf::atom("pace")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using fetch_atom = caf::atom_constant<caf::atom("fetch")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;
using wire_atom = caf::atom_constant<caf::atom("wire")>;
/// Topology -> ring peer: (peer_wire_atom, right, leader's right, group's peers).
using peer_wire_atom = caf::atom_constant<caf::atom("peerwire")>;
using reduce_atom = caf::atom_constant<caf::atom("reduce")>;
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;
using reduce_failed_atom = caf::atom_constant<caf::atom("redfailed")>;
using ring_atom = caf::atom_constant<caf::atom("ring")>;
using gossip_atom = caf::atom_constant<caf::atom("gossip")>;
using mixer_atom = caf::atom_constant<caf::atom("mixer")>;
using average_atom = caf::atom_constant<caf::atom("average")>;
using turn_atom = caf::atom_constant<caf::atom("turn")>;
using gather_atom = caf::atom_constant<caf::atom("gather")>;
using balance_atom = caf::atom_constant<caf::atom("balance")>;
using pause_atom = caf::atom_constant<caf::atom("pause")>;
using paused_atom = caf::atom_constant<caf::atom("paused")>;
using run_to_atom = caf::atom_constant<caf::atom("run_to")>;
using snapshot_at_atom = caf::atom_constant<caf::atom("snap_at")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using pin_atom = caf::atom_constant<caf::atom("pin")>;
using abandon_atom = caf::atom_constant<caf::atom("abandon")>;
using abandoned_atom = caf::atom_constant<caf::atom("abandoned")>;
using reform_atom = caf::atom_constant<caf::atom("reform")>;
/// Coordinator (or virtual time's reformer) -> ring worker: (rewire_atom,
/// generation, survivors, right): go on as a ring of the survivors.
using rewire_atom = caf::atom_constant<caf::atom("rewire")>;
using hold_at_atom = caf::atom_constant<caf::atom("hold_at")>;
using knock_atom = caf::atom_constant<caf::atom("knock")>;
using give_atom = caf::atom_constant<caf::atom("give")>;
using adopted_atom = caf::atom_constant<caf::atom("adopted")>;
using reformed_atom = caf::atom_constant<caf::atom("reformed")>;
using rejoined_atom = caf::atom_constant<caf::atom("rejoined")>;
using rebuilt_atom = caf::atom_constant<caf::atom("rebuilt")>;
/// Coordinator -> PS worker: (replica_atom, generation), send your replica
/// to report_to (lost shards are rebuilt from it).
using replica_atom = caf::atom_constant<caf::atom("replica")>;
/// PS worker -> coordinator: (replica_state_atom, meta, floats), the
/// replica replica_atom asked for (actors/snapshot.hpp's layout).
using replica_state_atom = caf::atom_constant<caf::atom("repstate")>;
/// Donor ring worker -> the ring worker behind it: (donor_atom, meta,
/// floats), the donor's state (actors/snapshot.hpp's layout) to adopt.
using donor_atom = caf::atom_constant<caf::atom("donor")>;
using computed_atom = caf::atom_constant<caf::atom("computed")>;
/// Worker 0 to the coordinator: (eval_atom, step, its parameters, its
/// BatchNorm statistics or an empty slice) to evaluate on the test set
/// during the run.
using eval_atom = caf::atom_constant<caf::atom("eval")>;

/// One row of the message table: a message's leading atom and whether
/// its tensor may travel by reference (see the table above).
struct message_kind {
  caf::atom_value atom;
  bool by_reference;
};

/// Every message of the vocabulary, in the order of the table above.
inline constexpr message_kind message_table[] = {
  {pull_atom::value, false},     {push_atom::value, true},       {push_pull_atom::value, true},
  {pace_atom::value, false},     {stats_atom::value, false},    {fetch_atom::value, false},     {step_atom::value, false},
  {metrics_atom::value, false},  {done_atom::value, false},      {eval_atom::value, false},
  {wire_atom::value, false},     {peer_wire_atom::value, false}, {reduce_atom::value, false},    {reduced_atom::value, false},
  {reduce_failed_atom::value, false},
  {ring_atom::value, true},      {gossip_atom::value, true},     {mixer_atom::value, false},
  {average_atom::value, true},    {turn_atom::value, false},      {gather_atom::value, true},     {balance_atom::value, false},
  {beat_atom::value, false},     {stop_atom::value, false},      {lost_atom::value, false},
  {tick_atom::value, false},     {pause_atom::value, false},     {paused_atom::value, false},
  {run_to_atom::value, false},   {snapshot_at_atom::value, false}, {caf::atom("snapshot"), false},
  {pin_atom::value, false},      {abandon_atom::value, false},   {abandoned_atom::value, false},
  {reform_atom::value, false},   {rewire_atom::value, false},   {hold_at_atom::value, false},   {knock_atom::value, false},
  {give_atom::value, false},     {adopted_atom::value, false},
  {reformed_atom::value, false}, {rejoined_atom::value, false},
  {rebuilt_atom::value, false},  {replica_atom::value, false},   {replica_state_atom::value, false}, {donor_atom::value, false},
  {caf::atom("barrier"), false},  {caf::atom("release"), false},
  {caf::atom("recheck"), false}, {caf::atom("missing"), false}, {computed_atom::value, false},
};

/// Whether a message led by `atom` may carry its tensor by reference; false
/// for atoms outside the vocabulary.
constexpr bool travels_by_reference(caf::atom_value atom) {
  for (const auto& k : message_table)
    if (k.atom == atom)
      return k.by_reference;
  return false;
}

/// A parameter or gradient slice, passed by reference count.
using slice = kernels::tensor;

/// A piece of an allreduced gradient: elements [offset, offset + data.numel())
/// of the parameter buffer, shared read-only by every peer that holds it.
struct piece {
  std::size_t offset = 0;
  slice data;
};
using pieces = std::vector<piece>;

/// What a worker reports when it finishes (or fails).
struct worker_report {
  int rank = 0;
  std::int64_t steps = 0, samples = 0;
  double seconds = 0, compute_seconds = 0, comm_seconds = 0;
  double last_loss = 0;            ///< mean training loss over the last epoch's worth of steps (all, if fewer)
  std::vector<std::int64_t> staleness; ///< one entry per applied push
  std::int64_t dropped = 0;        ///< pushes a sync shard dropped (backup workers)
  double wait_seconds = 0;         ///< part of comm_seconds spent waiting for other workers
  slice params;                    ///< the final replica (ring, gossip, local models)
  slice state;                     ///< its BatchNorm running statistics (models that have any)
  std::string error;               ///< empty on success
  std::vector<int> batches;        ///< speed balancing: the batch size of each step (else empty)
  /// Payload bytes this worker sent and received (gradients, parameters,
  /// compressed payloads; not headers or control messages).
  std::int64_t bytes_sent = 0, bytes_received = 0;
  /// compression.kind: the relative compression errors of the steps
  /// that compressed (models::compress_energy), summed, and how many.
  double compress_error_sum = 0;
  std::int64_t compressed_steps = 0;
  /// Each step's compute in milliseconds (the batch, its emulated slowdown
  /// and any optimizer work counted as compute), by step: lockstep
  /// topologies split their step time into compute, load imbalance and
  /// exchange from it (scheduler/app/step_breakdown.hpp).
  std::vector<float> step_compute_ms;
  /// A rank that lost contact with `rank` and reports it so (a ring
  /// neighbour); -1: rank 0 saw the loss itself, or the worker's own report.
  int reported_by = -1;
};

/// One worker's window of steps (the results contract's per-step record).
struct step_metrics {
  int rank = 0;
  std::int64_t step = 0;      ///< steps done at the end of the window
  std::int64_t samples = 0;   ///< samples done so far
  std::int64_t steps = 0;     ///< steps in the window
  double time = 0;            ///< seconds since the worker started
  double loss = 0;            ///< mean training loss over the window
  double compute_ms = 0, comm_ms = 0; ///< per step, averaged over the window
  double wait_ms = 0;         ///< the part of comm_ms spent waiting for other workers
  double staleness = 0;       ///< mean staleness of the window's pushes
  std::int64_t staleness_p99 = 0; ///< their 99th percentile (nearest rank)
  std::int64_t bytes_sent = 0, bytes_received = 0; ///< the worker's totals so far (worker_report's)
  double compress_error = -1; ///< the mean relative compression error of the window's steps (-1: none compressed)
};

/// Counts of staleness values 0, 1, 2, ... (index = staleness).
using histogram = std::vector<std::int64_t>;

} // namespace gradwire::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(gradwire::kernels::tensor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(gradwire::actors::worker_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(gradwire::actors::step_metrics)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(gradwire::actors::pieces)
