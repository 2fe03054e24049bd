#pragma once
/// @file checkpoint_gather.hpp
/// The coordinator's side of checkpoints: it gathers the workers' parts of
/// a step (a worker lost to the job has none; the survivors' complete it),
/// asks the shards for theirs, and hands the whole to the plan's
/// on_checkpoint (which persists it off this thread). Checkpoints by time
/// pause the workers at their next boundary and have them all snapshot one
/// step on the topology's grid (checkpoint_plan::align).

#include "actors/messages.hpp"
#include "actors/snapshot.hpp"
#include "scheduler/runtime/coordinator.hpp"
#include "kernels/stop_aware.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace gradwire::scheduler {

class checkpoint_gather {
public:
  using clock_type = std::chrono::steady_clock;
  using lost_fn = std::function<bool(std::size_t rank)>;

  checkpoint_gather(const checkpoint_plan& plan, std::size_t workers, std::chrono::milliseconds timeout)
      : plan_(plan), n_(workers), timeout_(timeout) {}

  /// A worker's part (snapshot_atom, meta, floats). `final_step`: a stop's
  /// checkpoint step (-1: none). True when a checkpoint was handed on (the
  /// shards were asked meanwhile: the workers went unheard that long).
  bool on_part(caf::scoped_actor& self, const std::string& meta, const actors::slice& floats, std::int64_t final_step,
               const lost_fn& lost);
  /// After a lost worker: the checkpoints that waited for its part, with
  /// the survivors' parts. True as on_part.
  bool complete_pending(caf::scoped_actor& self, std::int64_t final_step, const lost_fn& lost);

  /// Checkpoints by time (plan.every_seconds): whether one is due now.
  bool due() const;
  /// Shard i lives elsewhere now (rebuilt after its rank was lost).
  void replace_shard(std::size_t i, actors::shard_actor shard) {
    if (i < plan_.shards.size())
      plan_.shards[i] = std::move(shard);
  }
  bool pausing() const { return timed_pausing_; }
  /// The pause has taken too long: give it up.
  bool pause_too_long() const { return timed_pausing_ && kernels::waited_longer(timed_sent_, std::chrono::seconds(10)); }
  /// Every running worker holds at its next boundary and says which.
  void start(caf::scoped_actor& self, const std::vector<caf::actor>& workers, const std::vector<bool>& finished);
  void boundary(int rank, std::int64_t at) { timed_boundary_[static_cast<std::size_t>(rank)] = at; }
  /// Once every running worker has said where it holds: the step all
  /// snapshot, as they go on (give_up: none). The shards pin their
  /// version at that step first (shard_copies.hpp).
  void release(caf::scoped_actor& self, const std::vector<caf::actor>& workers, const std::vector<bool>& finished,
               bool give_up);
  void cancel() { timed_pausing_ = false; }

private:
  bool try_complete(caf::scoped_actor& self, std::int64_t step, std::int64_t final_step, const lost_fn& lost);

  checkpoint_plan plan_; // a copy: a shard rebuilt elsewhere replaces its handle here
  std::size_t n_;
  std::chrono::milliseconds timeout_;
  /// Checkpoints being collected: step -> parts by worker rank.
  std::map<std::int64_t, std::vector<std::optional<actors::snapshot_frame>>> collecting_;
  bool timed_pausing_ = false;
  clock_type::time_point timed_since_ = clock_type::now(), timed_sent_;
  std::vector<std::int64_t> timed_boundary_;
  std::set<std::int64_t> timed_steps_;
};

} // namespace gradwire::scheduler
