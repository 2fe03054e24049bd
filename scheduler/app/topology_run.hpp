#pragma once
/// @file topology_run.hpp
/// Runs an experiment whose [topology] has several workers (parameter
/// server, local SGD, ring, hierarchical, gossip): the actors in this
/// process, then the results folder.

#include "scheduler/app/config.hpp"
#include "scheduler/app/single_run.hpp"

#include <nlohmann/json.hpp>

namespace gradwire::scheduler {

/// Trains as `cfg` says (any topology.kind but "single") and returns
/// summary.json's content.
nlohmann::json run_actors(run_config cfg, const run_options& opts = {});

} // namespace gradwire::scheduler
