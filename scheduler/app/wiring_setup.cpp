#include "scheduler/app/wiring_setup.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace gradwire::scheduler {

namespace {

topology_kind kind_of(const std::string& k) {
  if (k == "local-sgd")
    return topology_kind::local_sgd;
  if (k == "ring")
    return topology_kind::ring;
  if (k == "hierarchical")
    return topology_kind::hierarchical;
  if (k == "gossip")
    return topology_kind::gossip;
  return topology_kind::parameter_server;
}

/// The [topology], [model], [train] and [experiment] keys.
void set_topology(topology_setup& setup, const run_config& cfg) {
  setup.kind = kind_of(cfg.topology);
  setup.spec = cfg.model;
  setup.opt = cfg.opt;
  setup.workers = cfg.workers;
  setup.ps = cfg.ps;
  if (cfg.shards_per_host) // one host in one process; across processes join_across counts them
    setup.ps.shards = cfg.virt.on ? cfg.virt.hosts : 1;
  setup.ring = cfg.ring;
  if (setup.ring.group_size == 0) { // by host: one host in one process; across processes join_across decides
    setup.ring.group_size = cfg.virt.on ? cfg.virt.workers_per_host : cfg.workers;
    if (cfg.virt.on && !cfg.virt.host_workers.empty())
      setup.ring.group_of = cfg.virt.host_of(); // hosts of different sizes
  }
  setup.gossip = cfg.gossip;
  setup.distinct_init = !cfg.same_init;
  setup.faults = fault_schedule(cfg.faults, cfg.workers, cfg.seed);
  setup.batch_size = cfg.batch_size;
  setup.threads = cfg.threads;
  setup.how = models::parse_parallelism(cfg.parallelism);
  setup.seed = cfg.seed;
  setup.log_every = cfg.log_every;
  if (cfg.trace)
    setup.trace = std::make_shared<actors::tracer>(static_cast<std::size_t>(cfg.trace_spans));
}

} // namespace

kernels::device checked_device(const std::string& text, const std::string& where) {
  const std::string who = where.empty() ? "train.device" : where;
  const auto d = kernels::parse_device(text);
  if (!d.is_cpu()) {
    check(kernels::built_with_cuda(), who + " = \"" + text + "\": this gradwire was built without CUDA (gradwire info)");
    const int n = kernels::cuda_device_count();
    const auto why = kernels::cuda_unavailable();
    check(d.index < n, who + " = \"" + text + "\", but " + std::to_string(n) + " CUDA device(s) are visible (" +
                         (why.empty() ? "gradwire info" : why) + ")");
  }
  return d;
}

/// Whether workers of `s` may each have their own learning rate.
bool per_worker_lr(const topology_setup& s) {
  switch (s.kind) {
  case topology_kind::parameter_server: return !s.ps.sync;
  case topology_kind::local_sgd:
  case topology_kind::gossip: return true;
  default: return false;
  }
}

namespace {

/// Devices: train.device for every worker, or each [[nodes]] group's own
/// device, threads, batch and emulated speed.
void set_workers(topology_setup& setup, const run_config& cfg) {
  if (cfg.nodes.empty())
    setup.worker_device.assign(static_cast<std::size_t>(cfg.workers), checked_device(cfg.device, cfg.device_where));
  for (const auto& g : cfg.nodes)
    for (int i = 0; i < g.count; ++i) {
      setup.worker_device.push_back(
        g.device.empty() ? checked_device(cfg.device, cfg.device_where)
                         : checked_device(g.device, g.where + " (group '" + g.name + "') device"));
      setup.worker_threads.push_back(g.threads > 0 ? g.threads : cfg.threads);
      setup.worker_batch.push_back(g.batch_size > 0 ? g.batch_size : cfg.batch_size);
      setup.worker_slowdown.push_back(g.slowdown);
      setup.worker_delay_ms.push_back(g.delay_ms);
      setup.worker_jitter_ms.push_back(g.jitter_ms);
      setup.worker_lr_scale.push_back(g.lr_scale);
    }
  for (const auto& g : cfg.nodes) // where replicas must stay equal, every worker applies the same update
    check(g.lr_scale == 1.0 || per_worker_lr(setup),
          g.where + " (group '" + g.name + "'): lr_scale works where a worker's updates are its own (async or SSP "
                    "parameter server, local SGD, gossip); topology " + cfg.topology +
            " keeps every replica equal");
  int threads = 0; // of the whole job: whether ring workers may poll
  for (int r = 0; r < cfg.workers; ++r)
    threads += static_cast<std::size_t>(r) < setup.worker_threads.size() ? setup.worker_threads[static_cast<std::size_t>(r)]
                                                                          : cfg.threads;
  setup.spin_wait = spin_wait_default(threads);
}

} // namespace

bool shares_budget(const topology_setup& s) {
  switch (s.kind) {
  case topology_kind::parameter_server: return !s.ps.sync && !s.ps.local_sgd();
  case topology_kind::gossip: return s.gossip.mode == actors::gossip_mode::adpsgd;
  default: return false; // lock step: every worker's share is the same
  }
}

wiring_plan plan_wiring(const run_config& cfg, const models::dataset& train) {
  wiring_plan plan;
  auto& setup = plan.setup;
  set_topology(setup, cfg);
  set_workers(setup, cfg);
  setup.timeout = std::chrono::milliseconds(cfg.step_timeout_ms);
  // (A run with long steps is let finish one when told to stop.)
  set_stop_limit(setup.timeout, std::chrono::milliseconds(cfg.stop_wait_ms));
  setup.min_workers = cfg.min_workers;
  setup.rejoin = cfg.rejoin_s > 0 || cfg.restarts > 0;
  setup.restarts = cfg.restarts;
  for (const auto& f : cfg.faults)
    if (f.back_at_step > 0 && f.rank >= 0)
      setup.back_at_step[f.rank] = std::max(setup.back_at_step[f.rank], f.back_at_step);
  if (const char* v = std::getenv("GRADWIRE_REJOIN"); v != nullptr && std::string(v) == "1")
    setup.replacing = true;
  // Every worker runs the same number of full batches (sync needs it): as
  // many as the worker with the largest batch has in an epoch.
  int largest = cfg.batch_size;
  for (int b : setup.worker_batch)
    largest = std::max(largest, b);
  const std::int64_t per_worker = train.size() / cfg.workers;
  const std::int64_t per_epoch = per_worker / largest;
  check(per_epoch >= 1, cfg.source + ": each of the " + std::to_string(cfg.workers) + " workers gets " +
                          std::to_string(per_worker) + " samples, fewer than its batch size " + std::to_string(largest));
  setup.steps = per_epoch * cfg.epochs;
  if (cfg.max_steps > 0)
    setup.steps = std::min(setup.steps, cfg.max_steps);
  setup.eval_every = cfg.eval_steps > 0 ? cfg.eval_steps : per_epoch * cfg.eval_every;
  plan.steps_per_epoch = per_epoch;
  int global_batch = 0, smallest = largest; // the workers' batches summed, and the smallest
  for (int r = 0; r < cfg.workers; ++r) {
    const int b = static_cast<std::size_t>(r) < setup.worker_batch.size() ? setup.worker_batch[static_cast<std::size_t>(r)]
                                                                            : cfg.batch_size;
    global_batch += b;
    smallest = std::min(smallest, b);
  }
  const bool one_batch_updates = shares_budget(setup); // each update is one worker's batch
  // The learning rate: scaled to the global batch and scheduled over the
  // steps each worker runs (with a shared budget, its mean share).
  setup.opt = optimizer_for(cfg, per_epoch, setup.steps, one_batch_updates ? cfg.batch_size : global_batch);
  if (cfg.shared_budget && one_batch_updates) {
    // The samples every worker's steps would give, shared out by speed:
    // a worker may take up to all of them (epochs wrap around its shard).
    setup.budget_samples = setup.steps * global_batch;
    setup.steps = (setup.budget_samples + smallest - 1) / smallest;
  }
  return plan;
}

std::string describe(const run_config& cfg) {
  if (cfg.topology == "local-sgd")
    return fmt::format("local SGD, average every {} steps", cfg.ps.local_steps);
  const auto& ring = cfg.ring;
  const std::string balanced =
    ring.balance_every > 0 ? fmt::format(", batches balanced every {} steps", ring.balance_every) : "";
  if (cfg.topology == "ring")
    return fmt::format("ring allreduce, {} KiB buckets{}{}", ring.bucket_floats / 256, ring.overlap ? ", overlapped" : "",
                       balanced);
  if (cfg.topology == "hierarchical")
    return ring.group_size == 0 ? fmt::format("hierarchical allreduce, groups by host{}", balanced)
                                : fmt::format("hierarchical allreduce, groups of {}{}", ring.group_size, balanced);
  if (cfg.topology == "gossip")
    return fmt::format("gossip {} on a {} graph", cfg.gossip.mode == actors::gossip_mode::dpsgd ? "D-PSGD" : "AD-PSGD",
                       cfg.gossip.graph);
  std::string s = "parameter server, " + cfg.mode;
  if (cfg.mode == "sync" && cfg.ps.backup > 0)
    s += fmt::format(", {} backup worker(s)", cfg.ps.backup);
  if (cfg.mode != "sync" && cfg.ps.dc_lambda > 0)
    s += fmt::format(", DC-ASGD lambda {}", cfg.ps.dc_lambda);
  return s + (cfg.shards_per_host ? std::string(", a shard per host") : fmt::format(", {} shard(s)", cfg.ps.shards));
}

} // namespace gradwire::scheduler
