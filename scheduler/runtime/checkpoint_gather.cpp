#include "scheduler/runtime/checkpoint_gather.hpp"
#include "actors/worker_protocol.hpp"
#include "kernels/log.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace gradwire::scheduler {

bool checkpoint_gather::on_part(caf::scoped_actor& self, const std::string& meta, const actors::slice& floats,
                                std::int64_t final_step, const lost_fn& lost) {
  if (!plan_.on_checkpoint)
    return false;
  actors::snapshot_frame s;
  try {
    s = actors::snapshot_frame::checked(meta, floats, "a worker's checkpoint part");
  } catch (const std::exception& e) {
    log::warn("ignored: {}", e.what());
    return false;
  }
  int rank = -1;
  const bool periodic = (plan_.every > 0 && s.step % plan_.every == 0) || timed_steps_.count(s.step) > 0;
  if (std::sscanf(s.who.c_str(), "worker %d", &rank) != 1 || rank < 0 || static_cast<std::size_t>(rank) >= n_ ||
      s.step <= 0 || (!periodic && s.step != final_step))
    return false;
  auto& parts = collecting_[s.step];
  parts.resize(n_);
  const auto step = s.step;
  parts[static_cast<std::size_t>(rank)] = std::move(s);
  return try_complete(self, step, final_step, lost);
}

bool checkpoint_gather::complete_pending(caf::scoped_actor& self, std::int64_t final_step, const lost_fn& lost) {
  std::vector<std::int64_t> pending;
  for (const auto& c : collecting_)
    pending.push_back(c.first);
  bool any = false;
  for (auto step : pending)
    if (collecting_.count(step))
      any = try_complete(self, step, final_step, lost) || any;
  return any;
}

bool checkpoint_gather::try_complete(caf::scoped_actor& self, std::int64_t step, std::int64_t final_step,
                                     const lost_fn& lost) {
  auto& parts = collecting_[step];
  for (std::size_t r = 0; r < n_; ++r) // every worker still in the job (a lost one has no part)
    if (!parts[r] && !lost(r))
      return false;
  std::vector<actors::snapshot_frame> all;
  for (auto& p : parts)
    if (p)
      all.push_back(std::move(*p));
  collecting_.erase(collecting_.begin(), std::next(collecting_.find(step)));
  timed_steps_.erase(timed_steps_.begin(), timed_steps_.upper_bound(step));
  for (std::size_t i = 0; i < plan_.shards.size(); ++i) {
    // The final checkpoint of a stop: every worker has pushed its last step, the shards are there.
    const std::int64_t v = plan_.shard_version && step != final_step ? plan_.shard_version(step) : -1;
    bool ok = false;
    self->request(plan_.shards[i], timeout_, actors::snapshot_atom::value, v)
      .receive(
        [&](const std::string& m, const actors::slice& f) {
          try {
            const auto where = "shard " + std::to_string(i) + "'s checkpoint part";
            auto lay = actors::snapshot::layout(m, f.defined() ? static_cast<std::size_t>(f.numel()) : 0, where);
            lay.put("shard_version", lay.step); // filed under the checkpoint's step
            lay.step = step;
            all.push_back(actors::snapshot_frame::checked(lay.meta_for(lay.float_sizes), f, where));
            ok = true;
          } catch (const std::exception& e) {
            log::warn("checkpoint of step {} skipped: {}", step, e.what());
          }
        },
        [&](caf::error& e) {
          log::warn("checkpoint of step {} skipped: shard {}: {}", step, i, self->system().render(e));
        });
    if (!ok)
      return true; // the workers went unheard while the shards were asked
  }
  plan_.on_checkpoint(step, std::move(all));
  return true;
}

bool checkpoint_gather::due() const {
  return plan_.every_seconds > 0 && plan_.on_checkpoint && !timed_pausing_ &&
         clock_type::now() - timed_since_ > std::chrono::duration<double>(plan_.every_seconds);
}

void checkpoint_gather::start(caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                              const std::vector<bool>& finished) {
  timed_pausing_ = true;
  timed_sent_ = clock_type::now();
  timed_boundary_.assign(n_, -1);
  for (std::size_t r = 0; r < n_; ++r)
    if (!finished[r])
      self->send(actors::as_worker(workers[r]), actors::pause_atom::value);
}

void checkpoint_gather::release(caf::scoped_actor& self, const std::vector<caf::actor>& workers,
                                const std::vector<bool>& finished, bool give_up) {
  std::int64_t last = 0;
  for (std::size_t r = 0; r < n_ && !give_up; ++r) {
    if (!finished[r] && timed_boundary_[r] < 0)
      return;
    last = std::max(last, timed_boundary_[r]);
  }
  const auto align = std::max<std::int64_t>(1, plan_.align);
  const std::int64_t at = give_up ? -1 : (last + align - 1) / align * align;
  if (at > 0) {
    timed_steps_.insert(at);
    // Before any worker goes on: the shards keep their version at `at` until
    // asked, however long the workers' parts take to come in.
    const std::int64_t v = plan_.shard_version ? plan_.shard_version(at) : -1;
    for (std::size_t i = 0; i < plan_.shards.size() && v >= 0; ++i)
      self->send(plan_.shards[i], actors::pin_atom::value, v);
  }
  for (std::size_t r = 0; r < n_; ++r)
    if (!finished[r])
      self->send(actors::as_worker(workers[r]), actors::snapshot_at_atom::value, at);
  timed_pausing_ = false;
  timed_since_ = clock_type::now();
}

} // namespace gradwire::scheduler
