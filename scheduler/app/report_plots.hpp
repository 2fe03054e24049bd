#pragma once
/// @file report_plots.hpp
/// The plots of report.html (see report.hpp), as plot specs for plot.hpp:
/// a run's from its summary.json and metrics.jsonl records, a sweep's
/// from sweep.json and its points' folders.

#include "scheduler/app/plot.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gradwire::scheduler {

/// metrics.jsonl's records. A line that is not a JSON object is skipped,
/// and said in `skipped` ("line 57: not a JSON object"; a torn last line,
/// an interrupted run's, as cut off).
std::vector<nlohmann::json> read_records(const std::string& path, std::vector<std::string>* skipped = nullptr);

/// A language model's validation loss against the megabytes worker 0 had
/// sent by each evaluation's step: its step records' bytes_sent, linear
/// between two records (from 0 at step 0), and at its last record's bytes
/// per step beyond it. Empty where worker 0 sent nothing.
plot_series validation_loss_bytes(const std::vector<nlohmann::json>& records, const std::string& label);

/// A run's plots: loss and accuracy against time, steps, samples and
/// epochs; each worker's time split; staleness histograms and staleness
/// against time.
std::vector<plot_spec> run_plots(const nlohmann::json& summary, const std::vector<nlohmann::json>& records);

/// A sweep's plots (`dir` holds its point folders): every point's curves
/// overlaid (repeated seeds as a mean with a min-max band), speedup and
/// efficiency against workers, staleness per point.
std::vector<plot_spec> sweep_plots(const std::string& dir, const nlohmann::json& sweep);

} // namespace gradwire::scheduler
