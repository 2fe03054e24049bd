#pragma once
/// @file compare.hpp
/// `gradwire compare RUN_A RUN_B ... --out DIR`: runs from anywhere (this
/// async run against yesterday's sync run) on one page, DIR/report.html:
/// their curves overlaid (accuracy, loss, MB sent), their staleness
/// histograms side by side, a table of their figures and one of the config
/// keys whose values differ (from each run's config.toml).

#include "scheduler/app/report.hpp"

#include <string>
#include <vector>

namespace gradwire::scheduler {

/// Writes DIR/report.html, its plots and compare.json (the runs compared).
/// Throws gradwire::error naming a folder that is not a run's (a sweep's
/// points can be given one by one), or an output folder that
/// claim_compare_folder refuses.
report_outcome write_comparison(const std::vector<std::string>& runs, const std::string& out_dir, bool force = false);

/// A config.toml's keys, flattened ("train.lr" -> "0.05", TOML text;
/// [[faults]] entries as "faults[0].kind"); empty when the file is absent.
std::vector<std::pair<std::string, std::string>> flat_config(const std::string& path);

} // namespace gradwire::scheduler
