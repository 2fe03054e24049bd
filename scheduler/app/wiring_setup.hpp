#pragma once
/// @file wiring_setup.hpp
/// From a run's config to what the runtime wires (scheduler/runtime/
/// topology.hpp): the topology's options, every worker's device, threads,
/// batch and emulated speed from [[nodes]], and the steps per worker.

#include "models/dataset.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/runtime/topology.hpp"

#include <string>

namespace gradwire::scheduler {

struct wiring_plan {
  topology_setup setup;
  std::int64_t steps_per_epoch = 0; ///< per worker
};

/// The setup `cfg` asks for, for `train` samples; throws gradwire::error
/// naming the config file and key (a GPU that is not there, a batch larger
/// than a worker's share of the data).
wiring_plan plan_wiring(const run_config& cfg, const models::dataset& train);

/// The device `text` names, checked against this build and machine: a GPU
/// that is not there is an error naming `who` ("file:line: key").
kernels::device checked_device(const std::string& text, const std::string& who);

/// Sets what the GEMMs and attention on `d` compute in: cfg's train.precision.
void use_precision(const run_config& cfg, const kernels::device& d);

} // namespace gradwire::scheduler
