#pragma once
/// @file ring_worker_state.hpp
/// Inside the ring worker (ring_worker.cpp, ring_balance.cpp): its state,
/// and the steps its two files call across. Not for other actors.

#include "actors/batch_balance.hpp"
#include "actors/ring_allreduce.hpp"
#include "actors/worker_core.hpp"

#include <caf/all.hpp>

#include <map>
#include <memory>
#include <vector>

namespace gradwire::actors::ring_detail {

struct ring_worker_state : worker_core {
  std::size_t handed = 0;  ///< buckets of this round given to the peer
  std::size_t reduced = 0; ///< buckets of this round back from the peer
  std::vector<pieces> results; ///< by bucket, kept until applied
  double round_wait = 0;
  bool in_round = false;
  clock_type::time_point round_start;
  /// Without a ring peer actor the worker runs the ring itself, between
  /// its computations (no thread besides the workers' own).
  std::unique_ptr<ring_allreduce> ring;
  /// The ring carries updated parameters (cfg.ring.sharded_update, own ring of
  /// several workers) and owned_apply the time spent updating this round.
  bool sharded = false;
  /// Elastic (cfg.elastic): the ring's generation (its messages' tag; a
  /// chunk of another is stale and dropped), this worker's ring world, and
  /// whether it is between a lost peer and the new ring.
  int generation = 0;
  int ring_world = 1;
  bool reforming = false;
  /// Chunks of the new ring that came before this worker's own place in it.
  struct early_chunk {
    std::int64_t round;
    int bucket, chunk, hop;
    slice data;
  };
  std::vector<early_chunk> early;
  bool announce = false; ///< say when the first step of a re-formed ring is done (its first survivor)
  double owned_apply = 0;
  slice owned_sum; ///< scratch for optimizers without a fused update (Adam)

  /// Speed balancing (cfg.ring.balance_every > 0).
  struct balancing {
    std::vector<caf::actor> workers; ///< by rank
    std::vector<int> batches;        ///< the split in force
    std::int64_t total = 0;          ///< the global batch
    balance_limits limits;
    speed_window window;             ///< this worker's, since the last round
    /// Measurements by round, filled by rank as they arrive.
    std::map<std::int64_t, std::pair<std::vector<speed_sample>, int>> rounds;
    bool waiting = false; ///< begin_step held until a round is complete
    std::int64_t resumed_at = 0; ///< rounds measured up to here were not kept (a resumed run)
    clock_type::time_point wait_start;
  } bal;
  /// A round's split is applied this many steps after it is measured (the
  /// others' measurements arrive meanwhile; a sync ring keeps its workers
  /// within a step of each other).
  static constexpr std::int64_t balance_lag = 2;

  static inline const char* name = "ring_worker";
};

using ring_worker_actor = caf::stateful_actor<ring_worker_state>;

// ring_worker.cpp
void begin_step(ring_worker_actor* self);
void await_mail(ring_worker_actor* self);
void on_reduced(ring_worker_actor* self, std::int64_t round, int bucket, pieces result, double wait);

// ring_balance.cpp: speed balancing (ring_options::balance_every).
std::int64_t due_round(const ring_worker_state& st);
void share_speed(ring_worker_actor* self);
bool apply_balance(ring_worker_actor* self);
void init_balancing(ring_worker_state& st);
void on_speed(ring_worker_actor* self, std::int64_t round, int rank, speed_sample sample);

} // namespace gradwire::actors::ring_detail
