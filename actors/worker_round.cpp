/// @file worker_round.cpp
/// The parameter-server worker's rounds (worker_round.hpp), one class each:
///   every step    sync (the step's version), async (whatever the shard
///                 holds; SSP: no more than bound steps ahead of the
///                 slowest; push and pull in one), backup workers (the
///                 version after the last one computed on);
///   local rounds  local SGD and sync DiLoCo: local_steps of training, then
///                 the parameters (compressed: their change) pushed;
///   async DiLoCo  each worker's pseudo-gradient when its round ends, the
///                 rounds' lengths from shard 0 with dynamic local steps.
#include "actors/worker_round.hpp"

#include <algorithm>

namespace gradwire::actors {

bool worker_round::begins(const round_clock& /*c*/) const { return true; }
bool worker_round::ends(const round_clock& /*c*/) const { return true; }
std::int64_t worker_round::wanted_version(const round_clock& /*c*/, std::int64_t /*last*/) const { return 0; }

namespace {

class sync_round final : public worker_round {
public:
  std::int64_t wanted_version(const round_clock& c, std::int64_t /*last*/) const override { return c.step; }
};

class backup_round final : public worker_round {
public:
  /// The version after the one this worker last computed on (the last is the run's steps).
  std::int64_t wanted_version(const round_clock& c, std::int64_t last) const override {
    return c.step == 0 ? 0 : std::min(last + 1, c.steps);
  }
  bool ends_by_versions() const override { return true; }
};

class async_round final : public worker_round {
public:
  async_round(int bound, bool push_pull) : bound_(bound), push_pull_(push_pull) {}
  std::int64_t min_clock(const round_clock& c) const override { return bound_ >= 0 ? c.step - bound_ : 0; }
  /// (The last step's push needs no parameters back.)
  bool push_pull(const round_clock& c) const override { return push_pull_ && c.step + 1 < c.steps; }

private:
  int bound_;
  bool push_pull_;
};

/// Rounds of local_steps; the run's last step ends one.
class local_round : public worker_round {
public:
  explicit local_round(int h) : h_(h) {}
  int local_steps() const override { return h_; }
  bool begins(const round_clock& c) const override { return c.step % h_ == 0; }
  bool ends(const round_clock& c) const override { return c.step + 1 >= c.steps || (c.step + 1) % h_ == 0; }

protected:
  int h_;
};

/// Local SGD and sync DiLoCo: the round's average (version step / H);
/// compressed pushes are the parameters' change over the round.
class averaging_round final : public local_round {
public:
  averaging_round(int h, bool compressed) : local_round(h), compressed_(compressed) {}
  bool pushes_pseudo() const override { return compressed_; }
  std::int64_t wanted_version(const round_clock& c, std::int64_t /*last*/) const override { return c.step / h_; }

private:
  bool compressed_;
};

/// Async DiLoCo: pseudo-gradients, whatever the shard holds; with dynamic
/// local steps a round is as long as shard 0 last said.
class async_diloco_round final : public local_round {
public:
  async_diloco_round(int h, bool dynamic, bool push_pull) : local_round(h), dynamic_(dynamic), push_pull_(push_pull) {}
  bool begins(const round_clock& c) const override {
    return dynamic_ ? c.step == c.round_start : local_round::begins(c);
  }
  bool ends(const round_clock& c) const override {
    if (!dynamic_ || c.step + 1 >= c.steps)
      return local_round::ends(c);
    return c.step + 1 - c.round_start >= c.round_len;
  }
  bool pushes_pseudo() const override { return true; }
  bool push_pull(const round_clock& c) const override { return push_pull_ && c.step + 1 < c.steps; }
  bool sends_pace(const round_clock& c) const override { return dynamic_ && c.step + 1 < c.steps; }

private:
  bool dynamic_, push_pull_;
};

} // namespace

std::unique_ptr<worker_round> make_worker_round(const ps_options& ps, bool compressed) {
  if (ps.outer_async())
    return std::make_unique<async_diloco_round>(ps.local_steps, ps.dynamic(), ps.uses_push_pull());
  if (ps.local_sgd())
    return std::make_unique<averaging_round>(ps.local_steps, compressed);
  if (ps.backups() > 0)
    return std::make_unique<backup_round>();
  if (ps.sync)
    return std::make_unique<sync_round>();
  return std::make_unique<async_round>(ps.bound(), ps.uses_push_pull());
}

} // namespace gradwire::actors
