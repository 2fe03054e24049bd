#pragma once
/// @file sweep_table.hpp
/// A sweep's comparison table from its points' summaries: points equal but
/// for experiment.seed are repeats (mean ± sample standard deviation);
/// speedup and efficiency against the group with the fewest workers.

#include "scheduler/app/sweep.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

/// One finished point: its value on each axis and its summary.json.
struct sweep_point {
  std::vector<std::string> values;
  nlohmann::json summary;
};

struct sweep_table {
  std::string md, csv;
  nlohmann::json rows = nlohmann::json::array();
};

/// Mean and sample standard deviation of the numbers of `xs` that are not
/// NaN (mean NaN: none; sd NaN: fewer than two).
std::pair<double, double> mean_and_sd(const std::vector<double>& xs);

sweep_table make_sweep_table(const std::vector<sweep_point>& done, const std::vector<sweep_axis>& axes);

} // namespace gradwire::scheduler
