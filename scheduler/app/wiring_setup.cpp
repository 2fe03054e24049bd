#include "scheduler/app/wiring_setup.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace gradwire::scheduler {

namespace {

/// The [topology], [model], [train] and [experiment] keys.
void set_topology(topology_setup& setup, const run_config& cfg) {
  check(!cfg.single(), cfg.source + ": topology.kind = \"single\" trains one worker without actors (run_single); "
                      "a wiring needs one of: " + family_names());
  setup.family = cfg.family;
  setup.by_host = cfg.family->has_shards ? cfg.shards_per_host : cfg.family->has_groups && cfg.ring.group_size == 0;
  setup.spec = cfg.model;
  setup.opt = cfg.opt;
  setup.workers = cfg.workers;
  static_cast<actors::family_options&>(setup) = cfg; // every family's options, whole
  if (cfg.shards_per_host) // one host in one process; across processes join_across counts them
    setup.ps.shards = cfg.virt.on ? cfg.virt.hosts : 1;
  if (setup.ring.group_size == 0) { // by host: one host in one process; across processes join_across decides
    setup.ring.group_size = cfg.virt.on ? cfg.virt.workers_per_host : cfg.workers;
    if (cfg.virt.on && !cfg.virt.host_workers.empty())
      setup.ring.group_of = cfg.virt.host_of(); // hosts of different sizes
  }
  setup.compress = cfg.compress;
  setup.distinct_init = !cfg.same_init;
  setup.faults = fault_schedule(cfg.faults, cfg.workers, cfg.seed);
  setup.batch_size = cfg.batch_size;
  setup.threads = cfg.threads;
  setup.how = models::parse_parallelism(cfg.parallelism);
  setup.seed = cfg.seed;
  setup.partition = cfg.partition;
  setup.log_every = cfg.log_every;
  if (cfg.record)
    setup.record_dir = cfg.out + "/record";
  setup.record_max_bytes = cfg.record_max_mb << 20;
  setup.run_id = cfg.run_id;
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

void use_precision(const run_config& cfg, const kernels::device& d) {
  kernels::backend_for(d).set_gemm_math(cfg.precision == "bf16" ? kernels::gemm_math::bf16 : kernels::gemm_math::fp32);
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
  for (const auto& d : setup.worker_device)
    use_precision(cfg, d);
  for (const auto& g : cfg.nodes) // where replicas must stay equal, every worker applies the same update
    check(g.lr_scale == 1.0 || setup.family->per_worker_lr(setup),
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
  check(per_epoch >= 1, (cfg.overridden.count("topology.workers") || cfg.overridden.count("train.batch_size")
                           ? std::string("--set")
                           : cfg.source) +
                          ": each of the " + std::to_string(cfg.workers) + " workers gets " +
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
  const bool one_batch_updates = setup.family->shares_budget(setup); // each update is one worker's batch
  // The learning rate: scaled to the global batch and scheduled over the
  // steps each worker runs (with a shared budget, its mean share).
  setup.opt = optimizer_for(cfg, per_epoch, setup.steps, one_batch_updates ? cfg.batch_size : global_batch);
  if (cfg.compress.warmup > 0 && setup.opt.kind != "sgd") // 1-bit Adam: the variance as the dense steps left it
    setup.opt.freeze_variance_after = cfg.compress.warmup;
  if (cfg.shared_budget && one_batch_updates) {
    // The samples every worker's steps would give, shared out by speed:
    // a worker may take up to all of them (epochs wrap around its shard).
    setup.budget_samples = setup.steps * global_batch;
    setup.steps = (setup.budget_samples + smallest - 1) / smallest;
  }
  return plan;
}

} // namespace gradwire::scheduler
