#pragma once
/// @file report_plots.hpp
/// The plots of report.html (see report.hpp), as plot specs for plot.hpp:
/// a run's from its summary.json and metrics.jsonl records, a sweep's
/// from sweep.json and its points' folders.

#include "scheduler/app/plot.hpp"
#include "scheduler/app/report_curves.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gradwire::scheduler {

/// A run's plots: loss and accuracy against time, steps, samples and
/// epochs; each worker's time split; its compression error, if it
/// compressed; staleness histograms and staleness against time.
std::vector<plot_spec> run_plots(const nlohmann::json& summary, const std::vector<nlohmann::json>& records);

/// A sweep's plots (`dir` holds its point folders): every point's curves
/// overlaid (repeated seeds as a mean with a min-max band), speedup and
/// efficiency against workers, staleness per point.
std::vector<plot_spec> sweep_plots(const std::string& dir, const nlohmann::json& sweep);

} // namespace gradwire::scheduler
