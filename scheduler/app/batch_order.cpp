#include "scheduler/app/batch_order.hpp"

#include "kernels/log.hpp"
#include "models/batcher.hpp"
#include "scheduler/app/data_source.hpp"
#include "scheduler/app/wiring_setup.hpp"

#include <algorithm>
#include <string>

namespace gradwire::scheduler {
namespace {

/// Whether a fault may take a worker out, and its shard moves to the others.
bool moves_shards(const run_config& cfg) {
  for (const auto& f : cfg.faults)
    if (f.kind == fault_kind::kill || f.kind == fault_kind::partition)
      return true;
  return false;
}

void write_line(std::FILE* out, int worker, std::int64_t step, const std::vector<std::int64_t>& samples) {
  std::string line = "{\"worker\": " + std::to_string(worker) + ", \"step\": " + std::to_string(step) +
                     ", \"samples\": [";
  for (std::size_t i = 0; i < samples.size(); ++i)
    line += (i > 0 ? ", " : "") + std::to_string(samples[i]);
  line += "]}\n";
  std::fputs(line.c_str(), out);
}

} // namespace

void write_batch_order(run_config cfg, std::int64_t steps, std::FILE* out) {
  const auto data = load_data(cfg);
  models::batch b;
  if (cfg.single()) { // one trainer, no workers: every batch, an epoch's partial last one too
    if (steps <= 0) { // as single_run counts them
      steps = cfg.epochs * ((data.train.size() + cfg.batch_size - 1) / cfg.batch_size);
      if (cfg.max_steps > 0)
        steps = std::min(steps, cfg.max_steps);
    }
    models::batcher feed(data.train, models::shard_indices(data.train.size(), 0, 1, cfg.seed), cfg.batch_size,
                         cfg.seed);
    for (std::int64_t step = 1; step <= steps; ++step) {
      while (!feed.next(b)) {
      }
      write_line(out, 0, step, b.indices);
    }
    return;
  }
  const auto plan = plan_wiring(cfg, data.train);
  const auto& s = plan.setup;
  if (steps <= 0)
    steps = s.steps;
  if (cfg.ring.balance_every > 0 || moves_shards(cfg))
    log::warn("{}: its batches move while it trains (speed balancing, or workers lost or joining): the order "
              "below holds until they first move", cfg.source);
  for (int r = 0; r < s.workers; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    const int batch = ri < s.worker_batch.size() ? s.worker_batch[ri] : s.batch_size;
    auto feed = models::worker_batcher(data.train, r, s.workers, s.seed, s.partition, batch);
    for (std::int64_t step = 1; step <= steps; ++step) {
      if (!feed.next_full(b))
        throw gradwire::error(cfg.source + ": worker " + std::to_string(r) + "'s data shard holds no full batch of " +
                              std::to_string(batch));
      write_line(out, r, step, b.indices);
    }
  }
}

} // namespace gradwire::scheduler
