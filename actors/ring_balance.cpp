#include "actors/ring_worker_state.hpp"
#include "actors/worker_protocol.hpp"

#include "kernels/error.hpp"

#include <string>

namespace gradwire::actors::ring_detail {

/// Balancing round due at the start of this step, or -1.
std::int64_t due_round(const ring_worker_state& st) {
  const auto k = static_cast<std::int64_t>(st.cfg.ring.balance_every);
  const auto r = st.step - ring_worker_state::balance_lag;
  return k > 0 && r > 0 && r > st.bal.resumed_at && r % k == 0 ? r : -1;
}

/// After a step: every balance_every steps, this worker's window goes to
/// every ring worker (itself included, directly).
void share_speed(ring_worker_actor* self) {
  auto& st = self->state;
  auto& b = st.bal;
  const auto k = static_cast<std::int64_t>(st.cfg.ring.balance_every);
  if (k <= 0 || st.step % k != 0 || st.step + ring_worker_state::balance_lag >= st.cfg.steps)
    return;
  const auto w = b.window.take();
  for (std::size_t r = 0; r < b.workers.size(); ++r)
    if (static_cast<int>(r) != st.cfg.rank)
      self->send(as_ring_worker(b.workers[r]), balance_atom::value, st.step, st.cfg.rank, w.compute_seconds, w.fixed_seconds,
                 w.samples, w.steps);
  auto& round = b.rounds[st.step];
  round.first.resize(static_cast<std::size_t>(st.cfg.world));
  round.first[static_cast<std::size_t>(st.cfg.rank)] = w;
  ++round.second;
}

/// At the start of a step: applies the round due now. False when some
/// worker's measurements have not arrived yet (the step waits for them).
bool apply_balance(ring_worker_actor* self) {
  auto& st = self->state;
  auto& b = st.bal;
  const auto r = due_round(st);
  if (r < 0)
    return true;
  auto it = b.rounds.find(r);
  if (it == b.rounds.end() || it->second.second < st.cfg.world) {
    if (!b.waiting)
      b.wait_start = st.now();
    b.waiting = true;
    return false;
  }
  if (b.waiting) {
    b.waiting = false;
    st.add_wait(st.since(b.wait_start));
  }
  b.batches = rebalance(b.batches, it->second.first, b.limits);
  b.rounds.erase(b.rounds.begin(), std::next(it));
  const int mine = b.batches[static_cast<std::size_t>(st.cfg.rank)];
  st.cfg.batch_size = mine;
  st.batches->set_batch_size(mine);
  st.cfg.ring.grad_weight = static_cast<float>(static_cast<double>(mine) * st.cfg.world / static_cast<double>(b.total));
  st.apply_grad_weight();
  return true;
}

/// Speed balancing's starting split: the config's, or a resumed run's
/// split in force at its checkpoint.
void init_balancing(ring_worker_state& st) {
  const auto& c = st.cfg;
  auto& b = st.bal;
  b.batches = c.ring.balance_batches;
  check(static_cast<int>(b.batches.size()) == c.world &&
          (c.resume != nullptr || b.batches[static_cast<std::size_t>(c.rank)] == c.batch_size),
        "speed balancing: " + std::to_string(b.batches.size()) + " starting batches for " +
          std::to_string(c.world) + " workers, or not this worker's batch " + std::to_string(c.batch_size));
  for (int x : b.batches)
    b.total += x;
  b.limits.min_batch = default_min_batch(b.total, c.world);
  // No batch larger than the smallest shard (each holds size / world or one more).
  b.limits.max_batch = static_cast<int>(std::min<std::int64_t>(b.total, c.data->size() / c.world));
  b.limits.min_batch = std::min(b.limits.min_batch, b.limits.max_batch);
  if (c.resume && c.resume->has("balance_batches")) {
    const auto& split = c.resume->i("balance_batches");
    check(split.size() == b.batches.size(), "speed balancing: the checkpoint's split is of " +
                                              std::to_string(split.size()) + " workers");
    std::int64_t sum = 0;
    for (std::size_t r = 0; r < split.size(); ++r) {
      check(split[r] > 0, "speed balancing: a batch of " + std::to_string(split[r]) + " in the checkpoint");
      b.batches[r] = static_cast<int>(split[r]);
      sum += split[r];
    }
    check(sum == b.total && b.batches[static_cast<std::size_t>(c.rank)] == c.batch_size,
          "speed balancing: the checkpoint's split sums to " + std::to_string(sum) + ", the global batch is " +
            std::to_string(b.total) + ", or does not hold this worker's batch");
    st.cfg.ring.grad_weight =
      static_cast<float>(static_cast<double>(st.cfg.batch_size) * c.world / static_cast<double>(b.total));
    st.apply_grad_weight();
  }
  b.resumed_at = st.step;
}

/// A worker's speed over its last window (balancing): checked, kept, and
/// the step begun once every worker's is in.
void on_speed(ring_worker_actor* self, std::int64_t round, int rank, speed_sample sample) {
  auto& s = self->state;
  const auto k = static_cast<std::int64_t>(s.cfg.ring.balance_every);
  if (k <= 0 || rank < 0 || rank >= s.cfg.world || rank == s.cfg.rank || round <= 0 || round % k != 0 ||
      round + ring_worker_state::balance_lag < s.step || sample.steps <= 0) {
    s.finish(self, s.who() + "unexpected speed measurement of round " + std::to_string(round) + " from rank " +
                     std::to_string(rank) + " at step " + std::to_string(s.step) +
                     (k <= 0 ? " (balancing is off here: is topology.ring.balance_every the same on every rank?)" : ""));
    return;
  }
  auto& entry = s.bal.rounds[round];
  entry.first.resize(static_cast<std::size_t>(s.cfg.world));
  if (entry.first[static_cast<std::size_t>(rank)].steps > 0) {
    s.finish(self, s.who() + "rank " + std::to_string(rank) + " sent its speed of step " + std::to_string(round) + " twice");
    return;
  }
  entry.first[static_cast<std::size_t>(rank)] = sample;
  ++entry.second;
  if (s.bal.waiting && due_round(s) == round && entry.second == s.cfg.world)
    begin_step(self);
  else
    await_mail(self);
}

} // namespace gradwire::actors::ring_detail
