#pragma once
/// @file virtual_run.hpp
/// A run on the virtual clock (experiment.clock = "virtual"), from its
/// config: each worker's compute model ([[nodes]] step_ms and slowdown
/// over [virtual]'s, a real run's replayed step times, or the step time
/// measured once on this machine for the model and batch and cached), the
/// link model, and the facts summary.json's "clock" records.

#include "scheduler/app/config.hpp"
#include "scheduler/runtime/topology.hpp"

#include <nlohmann/json.hpp>

#include <memory>

namespace gradwire::scheduler {

/// The simulation for `cfg` on `sys` (configure_virtual); `facts` gets the
/// models it uses. Throws gradwire::error naming the key or file at fault.
std::shared_ptr<simulation> make_simulation(caf::actor_system& sys, const run_config& cfg,
                                            const models::dataset& train, nlohmann::json& facts);

/// After the run: what it simulated and what that cost, into `facts`.
void add_simulation_cost(const simulation& sim, nlohmann::json& facts);

/// Seconds one worker's gradient of a batch of `batch` takes on this
/// machine (one thread; the median of 20 after 3 to warm up), read from
/// the cache when this machine measured it before. `cached` says which.
double measured_step_seconds(const run_config& cfg, int batch, const models::dataset& train, bool* cached = nullptr);

} // namespace gradwire::scheduler
