#pragma once
/// @file batch_order.hpp
/// `gradwire batches`: the training samples each worker of a run takes at
/// each step, drawn as the run draws them (the same partition, shuffles and
/// skipped partial batches), without training. Another system (PyTorch
/// DDP, a plain loop) fed these indices trains on gradwire's batches.

#include "scheduler/app/config.hpp"

#include <cstdint>
#include <cstdio>

namespace gradwire::scheduler {

/// Writes one JSON line per worker and step, workers in rank order:
/// {"worker": r, "step": s, "samples": [i, ...]} with s from 1 and the
/// indices into the training set as the run loads it (data.train_subset
/// applied). `steps` per worker; 0: the run's own steps. A run whose
/// batches move while it trains (speed balancing, workers lost or joining)
/// takes these until they move: a warning says so.
void write_batch_order(run_config cfg, std::int64_t steps, std::FILE* out);

} // namespace gradwire::scheduler
