#pragma once
/// @file ps_shard_state.hpp
/// Inside the parameter-server shard (ps_shard.cpp, shard_replay.cpp): its
/// state, and the steps its two files call across. Not for other actors.

#include "actors/local_steps.hpp"
#include "actors/ps_shard.hpp"
#include "actors/server_rule.hpp"
#include "actors/shard_copies.hpp"
#include "actors/update_record.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gradwire::actors::shard_detail {

struct pending_pull {
  int rank;
  std::int64_t min_version;
  std::int64_t min_clock;
  caf::response_promise promise;
  std::chrono::steady_clock::time_point since;
};

/// A replay's message that waits for its turn in the record.
struct held_message {
  enum class what { none, push, push_pull, pull };
  what kind = what::none;
  std::int64_t base_version = 0, step = 0, samples = 0, min_version = 0, min_clock = 0;
  slice grad;
  caf::response_promise promise;
};

/// A replay (shard_config::replay): the record's entries, taken in order.
/// Each worker has at most one message at a shard at a time, so one held
/// message per rank.
struct replay_gate {
  std::shared_ptr<const shard_record> record;
  std::size_t next = 0;                        ///< the entry due
  std::vector<std::vector<std::size_t>> mine;  ///< by rank: its entries' indices
  std::vector<std::size_t> mine_next;          ///< by rank: its entry due
  std::vector<held_message> held;              ///< by rank
};

struct shard_state {
  shard_config cfg;
  slice params;               ///< the shard's own copy
  slice sum;                  ///< sync: gradients summed for this version
  /// Sync and local SGD: this version's pushes by rank, summed in rank
  /// order once all are in, so the sum is the same bits whatever order
  /// they arrived in (a float sum depends on its order from 3 terms on).
  std::vector<slice> round;
  std::vector<std::int64_t> round_samples;
  int pushed = 0;             ///< sync: pushes received for this version
  std::int64_t samples = 0;   ///< sync: samples behind them
  std::int64_t version = 0;
  std::unique_ptr<models::optimizer> opt;
  std::vector<pending_pull> waiting;
  histogram staleness;
  std::vector<std::int64_t> clocks; ///< steps pushed, per worker rank
  /// Workers still in the job (a lost one is left out of every version and
  /// clock after the coordinator's reform), and the last reform seen.
  std::vector<bool> live;
  int generation = 0;
  std::int64_t max_gap = 0;         ///< largest (fastest - slowest) clock seen
  std::vector<std::int64_t> dropped; ///< backup workers: late pushes, per rank
  /// compression.kind: decodes the workers' payloads into dense slices.
  std::unique_ptr<models::compressor> decoder;
  /// What the shard does with the pushes (server_rule.hpp).
  std::unique_ptr<server_rule> rule;
  pace_table paces;                 ///< dynamic local steps (local_steps.hpp): shard 0's
  trace_ref tr;
  std::optional<shard_copies> copies; ///< for checkpoints (shard_copies.hpp)
  std::unique_ptr<record_writer> rec; ///< experiment.record: this shard's updates, in order
  bool rec_warned = false;
  std::optional<replay_gate> gate;    ///< gradwire replay
  static inline const char* name = "ps_shard";
};

/// The shard itself, inside its handlers.
using shard_self = shard_actor::stateful_pointer<shard_state>;

/// What a push came to: the error text (nothing changed), or the staleness
/// to answer with (-1: dropped, -2: after the last version).
struct push_outcome {
  std::string error;
  std::int64_t staleness = 0;
};

std::size_t len(const shard_state& s);
/// For the rules (server_rule.hpp): one optimizer step at `lr_scale`; a
/// plain SGD step at `lr` (the optimizer's state left alone); each a new
/// version. next_version: the version moves on (the parameters were set).
void apply(shard_state& s, const float* grad, float lr_scale);
void apply_plain(shard_state& s, const float* grad, float lr);
void next_version(shard_state& s);
/// The end of an update the rule made itself: virtual time charges its
/// cost, the version moves on.
void applied(shard_state& s);
/// The shard's state for a checkpoint (shard_snapshot.cpp), and back;
/// restore throws when the snapshot is another shard's or malformed.
snapshot take_snapshot(const shard_state& s);
void restore(shard_state& s, const snapshot& in);
bool ready(const shard_state& st, std::int64_t min_version, std::int64_t min_clock);
/// The slice for a pull by `rank` (recorded as answered).
slice answer(shard_state& st, int rank);
/// Takes one push: sums it (sync, average) or applies it (async, recorded).
push_outcome take_push(shard_state& st, int rank, std::int64_t base_version, std::int64_t step, std::int64_t samples,
                       const slice& grad);

/// (pace_atom): a worker's pace kept, its next round's steps answered
/// (dynamic local steps, local_steps.hpp).
caf::result<std::int64_t> on_pace(shard_state& st, int rank, std::int64_t step, double seconds_per_step);

/// Replay: the gate for `record`, for `workers` workers.
replay_gate open_gate(std::shared_ptr<const shard_record> record, int workers);
/// Replay: holds `m` from `rank` until its entry is due, then takes every
/// message whose entry is due. A message the record does not expect next
/// from its rank is refused naming the entry (the replay diverged).
void hold_for_turn(shard_self self, int rank, held_message m);

} // namespace gradwire::actors::shard_detail
