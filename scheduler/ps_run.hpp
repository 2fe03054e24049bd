#pragma once
/// @file ps_run.hpp
/// Runs an experiment whose [topology] is a parameter server: workers and
/// shards as CAF actors in this process, then the results folder.

#include "scheduler/config.hpp"
#include "scheduler/single_run.hpp"

#include <nlohmann/json.hpp>

namespace gradwire::scheduler {

/// Trains as `cfg` says (topology.kind = "parameter-server" or "local-sgd")
/// and returns summary.json's content.
nlohmann::json run_ps(run_config cfg, const run_options& opts = {});

} // namespace gradwire::scheduler
