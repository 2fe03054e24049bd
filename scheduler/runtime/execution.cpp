#include "scheduler/runtime/execution.hpp"
#include "actors/worker_protocol.hpp"
#include "actors/coordinator_protocol.hpp"

#include "kernels/error.hpp"
#include "kernels/log.hpp"
#include "transport/node.hpp"

#include <chrono>
#include <optional>
#include <utility>

namespace gradwire::scheduler {

namespace {

/// A rank other than 0: its worker reports to rank 0; this waits for it to
/// finish. Rank 0 stops the job at a common step (and keeps a checkpoint);
/// told to stop, this rank stops its worker on its own only if rank 0 has
/// not within `stop_alone_after` (longer than rank 0's own pause bound).
void await_worker(caf::scoped_actor& self, const caf::actor& worker, const std::atomic<bool>* stop) {
  constexpr auto stop_alone_after = stop_pause_bound + std::chrono::seconds(5);
  self->monitor(worker);
  bool done = false;
  std::optional<std::chrono::steady_clock::time_point> stopped;
  while (!done)
    self->receive([&](caf::down_msg&) { done = true; },
                  caf::after(std::chrono::milliseconds(200)) >> [&] {
                    if (!stop || !stop->load())
                      return;
                    if (!stopped)
                      stopped = std::chrono::steady_clock::now();
                    else if (std::chrono::steady_clock::now() - *stopped > stop_alone_after)
                      self->send(actors::as_worker(worker), actors::stop_atom::value);
                  });
}

/// Rank 0's elastic plan: a ring that lets a lost worker back in when its
/// process asks (cut off after a stall or partition, and alive).
elastic_plan rejoin_plan(caf::scoped_actor& self, const topology_setup& setup, const elastic_plan& elastic) {
  auto& nd = *setup.node;
  auto plan = elastic;
  if (setup.rejoin && plan.on && !plan.tell_survivors) {
    plan.readmit = [&nd](int r) { nd.rejoin().readmit_everywhere(r); };
    plan.back_at_step = setup.back_at_step;
    nd.rejoin().set_on_knock([coordinator = caf::actor_cast<caf::actor>(self)](int r) {
      caf::anon_send(actors::as_coordinator(coordinator), actors::knock_atom::value, r);
    });
  } else if (setup.rejoin)
    log::warn("transport.rejoin_s is set, but only an elastic ring lets a rank back in{}: a rank cut off leaves the "
              "job", plan.on ? " (this job's workers go on without it)" : (" (" + plan.why_not + ")"));
  return plan;
}

} // namespace

execution::execution(caf::actor_system& sys, const topology_setup& setup)
    : sys_(sys), setup_(setup), self_(sys), guard_(sys) {
  if (!setup_.node) {
    workers_.resize(static_cast<std::size_t>(setup_.workers));
    return;
  }
  check_one_worker_per_process(setup_);
  if (setup_.node->rank() == 0)
    setup_.node->publish(transport::slots::coordinator, caf::actor_cast<caf::actor>(self_));
}

std::vector<int> execution::ranks() const {
  if (setup_.node)
    return {setup_.node->rank()};
  std::vector<int> all(static_cast<std::size_t>(setup_.workers));
  for (int r = 0; r < setup_.workers; ++r)
    all[static_cast<std::size_t>(r)] = r;
  return all;
}

caf::actor execution::report_to() {
  if (setup_.node && setup_.node->rank() != 0)
    return setup_.node->remote(0, transport::slots::coordinator);
  return caf::actor_cast<caf::actor>(self_);
}

void execution::add_worker(int rank, const caf::actor& spawned) {
  mine_.push_back(spawned);
  if (!setup_.sim) // in virtual time the simulation ends every placed actor
    guard_.add(spawned);
  if (setup_.node) {
    setup_.node->publish(transport::slots::worker, spawned);
    return;
  }
  workers_[static_cast<std::size_t>(rank)] = place_here(setup_, spawned, rank, true);
}

const std::vector<caf::actor>& execution::workers() {
  if (complete_ || !setup_.node)
    return workers_;
  if (setup_.on_published)
    setup_.on_published(); // every rank has published: frames find their actors
  const int rank = setup_.node->rank();
  for (int r = 0; r < setup_.workers; ++r)
    workers_.push_back(r == rank ? mine_.front() : setup_.node->remote(r, transport::slots::worker));
  complete_ = true;
  return workers_;
}

void execution::wire(const wire_fn& wire) {
  const auto& all = workers();
  for (int r : ranks())
    wire(self_, r, all);
}

caf::actor execution::add_actor(int rank, std::uint32_t slot, const caf::actor& spawned) {
  others_mine_.push_back(spawned);
  if (!setup_.sim)
    guard_.add(spawned);
  if (setup_.node)
    setup_.node->publish(slot, spawned);
  auto handle = setup_.node ? spawned : place_here(setup_, spawned, rank, false);
  others_[{rank, slot}] = handle;
  return handle;
}

caf::actor execution::actor_of(int rank, std::uint32_t slot) {
  if (rank < 0)
    return {};
  if (const auto it = others_.find({rank, slot}); it != others_.end())
    return it->second;
  check(setup_.node != nullptr && rank < setup_.workers,
        "execution: no actor of rank " + std::to_string(rank) + " in slot " + std::to_string(slot));
  return setup_.node->remote(rank, slot);
}

void execution::finish() {
  auto all = std::exchange(others_mine_, {});
  if (setup_.node) { // the worker has ended already (coordinate_across, or on its own)
    stop_actors(self_, all);
    return;
  }
  all.insert(all.end(), mine_.begin(), mine_.end());
  mine_.clear();
  end_here(self_, setup_, all);
}

void execution::tell_on_kill(std::vector<actors::shard_actor> shards) {
  if (setup_.sim)
    setup_.sim->set_reform_targets(std::move(shards), workers());
}

std::optional<coordination> execution::coordinate(const progress_fn& on_progress, const metrics_fn& on_metrics,
                                                  const std::atomic<bool>* stop, const checkpoint_plan& checkpoints,
                                                  const elastic_plan& elastic, bool carry_on) {
  if (!setup_.node)
    return coordinate_here(self_, setup_, workers(), on_progress, on_metrics, stop, checkpoints, elastic);
  if (setup_.node->rank() != 0) {
    await_worker(self_, mine_.front(), stop);
    setup_.node->ending(); // this rank's part is done: the others leave as they finish
    return std::nullopt;
  }
  coordinator_options o;
  o.timeout = setup_.timeout;
  o.on_progress = on_progress;
  o.on_metrics = on_metrics;
  o.stop = stop;
  o.carry_on = carry_on;
  o.on_eval = setup_.on_eval;
  o.budget_samples = setup_.budget_samples;
  o.checkpoints = checkpoints;
  return coordinate_across(std::move(o), elastic);
}

std::optional<coordination> execution::coordinate_across(coordinator_options o, const elastic_plan& elastic) {
  auto& nd = *setup_.node;
  o.cut_off = [&nd](int r, const std::string& why) { nd.cut_off(r, why); };
  o.on_finished = [&nd](int r) { nd.finished(r); };
  o.elastic = rejoin_plan(self_, setup_, elastic);
  auto c = scheduler::coordinate(self_, workers(), o);
  nd.rejoin().set_on_knock({});
  if (o.elastic.readmit) // whoever still knocks (a new process held for a step the run did not reach) leaves now
    nd.rejoin().dismiss_cut_off("rank 0 ended the job before letting this rank back in");
  stop_actors(self_, mine_);
  return c;
}

} // namespace gradwire::scheduler
