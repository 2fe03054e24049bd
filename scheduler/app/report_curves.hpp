#pragma once
/// @file report_curves.hpp
/// The series report.html draws, read from a run's metrics.jsonl records
/// and summary.json: the shared parts of a run's plots and a sweep's
/// (report_plots.hpp).

#include "scheduler/app/plot.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

/// metrics.jsonl's records. A line that is not a JSON object is skipped,
/// and said in `skipped` ("line 57: not a JSON object"; a torn last line,
/// an interrupted run's, as cut off).
std::vector<nlohmann::json> read_records(const std::string& path, std::vector<std::string>* skipped = nullptr);

/// Counts per staleness value -> fraction of all.
std::vector<std::pair<double, double>> fractions(const nlohmann::json& hist);
/// Whether a summary's staleness has anything to draw (a stale push).
bool has_staleness(const nlohmann::json& summary);

/// Training loss per worker and test accuracy, against time and steps.
void curves(const std::vector<nlohmann::json>& records, const std::string& label, std::map<int, plot_series>& loss_t,
            std::map<int, plot_series>& loss_s, plot_series& acc_t, plot_series& acc_s);
/// Each worker's `y` against its `x`, from its step records that carry `y`.
std::map<int, plot_series> per_worker(const std::vector<nlohmann::json>& records, const char* x, const char* y);
/// Validation loss against time (a language model's curve: its accuracy
/// is next-token accuracy, its loss the figure that is compared).
plot_series test_loss_curve(const std::vector<nlohmann::json>& records, const std::string& label);
/// Worker 0's training loss against the megabytes it has sent (its step
/// records' bytes_sent); empty where it sent none (one worker, older runs).
plot_series loss_bytes_curve(const std::vector<nlohmann::json>& records, const std::string& label);
/// A language model's validation loss against the megabytes worker 0 had
/// sent by each evaluation's step: its step records' bytes_sent, linear
/// between two records (from 0 at step 0), and at its last record's bytes
/// per step beyond it. Empty where worker 0 sent nothing.
plot_series validation_loss_bytes(const std::vector<nlohmann::json>& records, const std::string& label);

/// Tokens per sample of a language model's run (summary.json's tokens over
/// its samples); 0 for other models.
double tokens_per_sample(const nlohmann::json& summary);
/// The first `limit` series of a map, in key order (moved out).
std::vector<plot_series> values_of(std::map<int, plot_series>& m, std::size_t limit);
/// A sweep point's label without its seed: seeds are repeats of one point.
std::string without_seed(const std::string& label);
/// Repeats of one curve -> their mean, point by point (as far as the
/// shortest goes), with the min-max band; one repeat stays as it is.
plot_series over_repeats(const std::string& title, const std::vector<plot_series>& reps);

} // namespace gradwire::scheduler
