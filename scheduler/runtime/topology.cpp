#include "scheduler/runtime/topology_registry.hpp"
#include "actors/coordinator_protocol.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>

namespace gradwire::scheduler {

std::vector<std::pair<std::size_t, std::size_t>> shard_ranges(std::size_t n, int parts) {
  check(parts >= 1, "topology.ps.shards must be at least 1");
  std::vector<std::pair<std::size_t, std::size_t>> r;
  for (int i = 0; i < parts; ++i) {
    auto edge = [&](int k) { return k == parts ? n : n * static_cast<std::size_t>(k) / static_cast<std::size_t>(parts) / 16 * 16; };
    r.emplace_back(edge(i), edge(i + 1));
  }
  return r;
}

std::vector<std::pair<std::size_t, std::size_t>> fragment_ranges(const models::param_layout& layout, std::size_t n,
                                                                  int parts) {
  const auto tensors = layout.offsets.size();
  check(parts >= 1 && static_cast<std::size_t>(parts) <= tensors,
        "topology.streaming.fragments = " + std::to_string(parts) + ": the model has " + std::to_string(tensors) +
          " tensors, and a fragment is one or more whole tensors");
  std::vector<std::pair<std::size_t, std::size_t>> r;
  std::size_t begin = 0, t = 0;
  for (int g = 0; g + 1 < parts; ++g) {
    // Cut at the first tensor edge past this group's share, leaving a
    // tensor for each group after it.
    const std::size_t share = n * static_cast<std::size_t>(g + 1) / static_cast<std::size_t>(parts);
    std::size_t cut = t + 1;
    while (cut + static_cast<std::size_t>(parts - g - 1) < tensors && layout.offsets[cut] < share)
      ++cut;
    r.emplace_back(begin, layout.offsets[cut]);
    begin = layout.offsets[cut];
    t = cut;
  }
  r.emplace_back(begin, n);
  return r;
}

std::shared_ptr<const actors::snapshot> resume_point::part(const std::string& who) const {
  const auto it = parts.find(who);
  if (it == parts.end()) {
    std::string have;
    for (const auto& [k, v] : parts)
      have += (have.empty() ? "" : ", ") + k;
    throw error("the checkpoint of step " + std::to_string(step) + " has no part for " + who + " (it holds " +
                (have.empty() ? "none" : have) + "; was it saved by another topology or worker count?)");
  }
  return it->second;
}

std::int64_t checkpoint_grid(const topology_setup& setup) {
  if (setup.checkpoint_every > 0)
    return setup.checkpoint_every;
  if (setup.checkpoint_every_s <= 0)
    return 0;
  return setup.family->time_grid(setup);
}

checkpoint_plan checkpoints_of(const topology_setup& setup, std::vector<actors::shard_actor> shards,
                               std::function<std::int64_t(std::int64_t)> shard_version) {
  checkpoint_plan p;
  p.every = setup.on_checkpoint ? setup.checkpoint_every : 0;
  p.every_seconds = setup.on_checkpoint ? setup.checkpoint_every_s : 0;
  p.align = std::max<std::int64_t>(1, checkpoint_grid(setup));
  p.shards = std::move(shards);
  p.shard_version = std::move(shard_version);
  p.on_checkpoint = setup.on_checkpoint;
  return p;
}

bool spin_wait_default(int job_threads) {
  if (const char* v = std::getenv("GRADWIRE_SPIN_WAIT"))
    return std::string(v) != "0";
  return job_threads <= static_cast<int>(std::thread::hardware_concurrency());
}

namespace {

/// Worker `rank`'s hooks into the job's [[faults]]. A replacement process
/// is outside the schedule: the kills and stalls aimed at its rank were
/// the old process's (and its clock starts now).
void inject_faults(actors::worker_config& wc, const topology_setup& setup, int rank, bool replacing) {
  auto strikes = setup.faults;
  if (replacing)
    strikes.erase(std::remove_if(strikes.begin(), strikes.end(),
                                 [rank](const fault_strike& s) {
                                   return (s.kind == fault_kind::kill || s.kind == fault_kind::stall) &&
                                          std::find(s.ranks.begin(), s.ranks.end(), rank) != s.ranks.end();
                                 }),
                  strikes.end());
  auto injector = std::make_shared<fault_injector>(strikes, rank, setup.workers, setup.link_faults, setup.sim);
  wc.faults.after_step = [injector](std::int64_t steps) { injector->after_step(steps); };
  wc.faults.in_step = [injector] { injector->in_step(); };
  wc.faults.take_nan = [injector] { return injector->take_nan(); };
  wc.faults.slowdown_now = [injector] { return injector->slowdown_now(); };
  wc.faults.slow_spell = [injector](double work, double begun_ago) { return injector->slowed(work, begun_ago); };
  if (setup.sim)
    wc.faults.killed = [injector] { return injector->killed(); };
}

} // namespace

actors::worker_config base_worker(const topology_setup& setup, const models::dataset& data, int rank,
                                  const caf::actor& coordinator, bool replacement) {
  actors::worker_config wc;
  const auto ri = static_cast<std::size_t>(rank);
  auto at = [&](const std::vector<double>& v, double dflt) { return ri < v.size() ? v[ri] : dflt; };
  wc.rank = rank;
  wc.world = setup.workers;
  wc.spec = setup.spec;
  wc.threads = ri < setup.worker_threads.size() ? setup.worker_threads[ri] : setup.threads;
  wc.device = ri < setup.worker_device.size() ? setup.worker_device[ri] : kernels::device::cpu();
  wc.separate_compute = setup.separate_compute;
  wc.spin_wait = setup.spin_wait;
  if (setup.node && setup.spin_wait) {
    std::weak_ptr<transport::node> nd = setup.node;
    wc.idle_poll = [nd] {
      auto n = nd.lock();
      return n && n->poll();
    };
  }
  wc.how = setup.how;
  wc.batch_size = ri < setup.worker_batch.size() ? setup.worker_batch[ri] : setup.batch_size;
  wc.slowdown = at(setup.worker_slowdown, 1.0);
  wc.delay_ms = at(setup.worker_delay_ms, 0.0);
  wc.jitter_ms = at(setup.worker_jitter_ms, 0.0);
  wc.steps = setup.steps;
  wc.step_progress = setup.budget_samples > 0 || !setup.back_at_step.empty();
  wc.joining = setup.replacing || replacement;
  wc.seed = setup.seed;
  wc.partition = setup.partition;
  wc.opt = setup.opt;
  wc.compress = setup.compress;
  wc.opt.lr = static_cast<float>(wc.opt.lr * at(setup.worker_lr_scale, 1.0)); // its own steps (local SGD, gossip)
  wc.data = &data;
  wc.log_every = setup.log_every;
  wc.stop = setup.sim ? nullptr : setup.stop;
  wc.report_to = coordinator;
  wc.gossip.distinct_init = setup.distinct_init;
  wc.trace = setup.trace;
  wc.eval_every = setup.eval_every;
  wc.checkpoint_every = setup.checkpoint_every; // across processes rank 0 collects them
  if (setup.resume)
    wc.resume = setup.resume->part("worker " + std::to_string(rank));
  if (!setup.faults.empty())
    inject_faults(wc, setup, rank, wc.joining);
  wc.request_timeout = setup.request_timeout();
  wc.beat_interval = setup.beat_interval();
  if (setup.sim) { // one event at a time on the simulation's clock: nothing polls or waits
    wc.vclock = setup.sim;
    wc.spin_wait = false;
    wc.idle_poll = {};
  }
  return wc;
}

caf::actor place_here(const topology_setup& setup, const caf::actor& spawned, int rank, bool worker) {
  return setup.sim ? setup.sim->place(spawned, setup.sim->host_of_worker(rank), worker ? rank : -1) : spawned;
}

coordination coordinate_here(caf::scoped_actor& self, const topology_setup& setup,
                             const std::vector<caf::actor>& workers, const progress_fn& on_progress,
                             const metrics_fn& on_metrics, const std::atomic<bool>* stop,
                             const checkpoint_plan& checkpoints, const elastic_plan& elastic) {
  coordinator_options o;
  o.on_progress = on_progress;
  o.on_metrics = on_metrics;
  o.stop = stop;
  o.on_eval = setup.on_eval;
  if (!setup.sim) {
    o.timeout = setup.timeout;
    o.budget_samples = setup.budget_samples;
    o.checkpoints = checkpoints;
    o.elastic = elastic;
    return coordinate(self, workers, o);
  }
  auto& sim = *setup.sim;
  sim.on_stuck([coordinator = caf::actor_cast<caf::actor>(self)](int rank, const std::string& why) {
    actors::worker_report rep;
    rep.rank = rank;
    rep.error = "worker " + std::to_string(rank) + ": stuck in virtual time: " + why;
    caf::anon_send(actors::as_coordinator(coordinator), actors::done_atom::value, rep);
  });
  sim.set_budget(setup.budget_samples); // counted by the loop, in virtual-time order
  struct stop_on_exit {
    simulation& s;
    ~stop_on_exit() { s.stop(); }
  } stopper{sim};
  sim.start();
  o.timeout = std::chrono::hours(24 * 365); // no silence limit on the machine's clock: the loop finds stuck workers
  o.carry_on = true; // a loss here is a kill, whose survivors the loop tells itself (simulation::lose_worker)
  o.virtual_time = true;
  auto c = coordinate(self, workers, o);
  sim.stop(); // every worker has reported: the loop's own state may be read from here
  c.budget_reached = sim.budget_reached();
  return c;
}

void end_here(caf::scoped_actor& self, const topology_setup& setup, const std::vector<caf::actor>& actors) {
  if (setup.sim)
    setup.sim->shut_down();
  else
    stop_actors(self, actors);
}

void take_coordination(topology_outcome& out, coordination c) {
  out.interrupted = c.interrupted;
  out.budget_reached = c.budget_reached;
  out.lost = c.lost;
  out.faults = c.faults;
  out.reports = std::move(c.reports);
}

topology_outcome replicas_outcome(coordination c, bool first) {
  check(c.failure.empty(), c.failure);
  topology_outcome out;
  std::vector<const actors::slice*> reps;
  for (const auto& r : c.reports)
    if (r.params.defined())
      reps.push_back(&r.params);
  check(!reps.empty(), "no worker returned its parameters");
  const auto n = static_cast<std::size_t>(reps.front()->numel());
  std::vector<double> mean(n, 0.0);
  for (const auto* p : reps)
    for (std::size_t k = 0; k < n; ++k)
      mean[k] += static_cast<double>(p->data()[k]) / static_cast<double>(reps.size());
  double norm = 0;
  for (double v : mean)
    norm += v * v;
  for (const auto* p : reps) {
    double d = 0;
    for (std::size_t k = 0; k < n; ++k)
      d += (p->data()[k] - mean[k]) * (p->data()[k] - mean[k]);
    out.replica_spread = std::max(out.replica_spread, std::sqrt(d / std::max(norm, 1e-30)));
  }
  if (first)
    out.params.assign(reps.front()->data(), reps.front()->data() + n);
  else
    out.params.assign(mean.begin(), mean.end());
  take_coordination(out, std::move(c));
  return out;
}

void check_one_worker_per_process(const topology_setup& setup) {
  const int procs = setup.node->size();
  check(setup.workers == procs, "topology.workers = " + std::to_string(setup.workers) + " but the job has " +
                                  std::to_string(procs) + " processes: across processes each process runs one worker "
                                  "(set topology.workers = " + std::to_string(procs) + ")");
}


namespace {

/// What virtual time runs so far, and what it refuses (each names the key).
void check_virtual(const topology_setup& setup) {
  const auto refuse = [](bool bad, const std::string& what) {
    check(!bad, "experiment.clock = \"virtual\" " + what);
  };
  refuse(setup.node != nullptr, "simulates every worker in one process: run it without --procs or a launcher");
  for (const auto& f : setup.faults) {
    const auto which = "(#" + std::to_string(f.entry + 1) + " is " + to_string(f.kind) + ")";
    refuse(f.kind == fault_kind::kill && !setup.family->survives_kill,
           "simulates a kill where the survivors go on: parameter servers (local SGD and DiLoCo too), gossip and a "
           "flat ring, not a hierarchical ring " + which);
  }
  refuse(setup.checkpoint_every > 0 || setup.checkpoint_every_s > 0, "does not write checkpoints yet");
  for (const auto& d : setup.worker_device)
    refuse(!d.is_cpu(), "computes every gradient on the CPU (train.device, [[nodes]] device): model a GPU node's "
                        "speed with its step time instead");
}

} // namespace

topology_outcome run_topology(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                              const progress_fn& on_progress, const metrics_fn& on_metrics,
                              const std::atomic<bool>* stop) {
  check(setup.workers >= 1, "topology.workers must be at least 1");
  for (const auto& f : setup.faults)
    check(!needs_processes(f.kind) || setup.node || setup.sim,
          "[[faults]] #" + std::to_string(f.entry + 1) + " kind = \"" + to_string(f.kind) + "\" " +
            (f.kind == fault_kind::kill ? "kills a worker's process, and in one process the whole run would end"
                                        : "acts on the links between processes, and one process has none") +
            ": run the job across processes (--procs N)");
  check(setup.family != nullptr, "topology_setup::family is null: give a family's row");
  const auto& family = *setup.family;
  if (setup.resume) { // every part there before any actor is spawned
    const int shards = family.has_shards ? setup.ps.shards : 0;
    for (int r = 0; r < setup.workers; ++r)
      setup.resume->part("worker " + std::to_string(r));
    for (int i = 0; i < shards; ++i)
      setup.resume->part("shard " + std::to_string(i));
    check(setup.resume->parts.size() == static_cast<std::size_t>(setup.workers + shards),
          "the checkpoint of step " + std::to_string(setup.resume->step) + " holds " +
            std::to_string(setup.resume->parts.size()) + " parts, more than this topology's actors");
  }
  if (setup.sim)
    check_virtual(setup);
  const auto t0 = std::chrono::steady_clock::now();
  topology_outcome out = family.run(sys, setup, data, on_progress, on_metrics, stop);
  out.seconds = setup.sim ? setup.sim->stats().virtual_seconds
                          : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

} // namespace gradwire::scheduler
