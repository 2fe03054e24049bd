#pragma once
/// @file report.hpp
/// `gradwire report DIR`: one HTML page (DIR/report.html) for a run folder
/// (summary.json, metrics.jsonl) or a sweep folder (sweep.json and its
/// point-NNN/ folders), with its tables and plots. Plots are drawn by
/// gnuplot into DIR/plots/*.svg and embedded in the page, so the page can
/// be sent on its own:
///
/// What each page plots: report_plots.hpp.
///
/// Without gnuplot the page still has every table and says what to
/// install. `gradwire run` writes the report at the end of a run or sweep.

#include <cstddef>
#include <string>

namespace gradwire::scheduler {

struct report_outcome {
  std::string html;    ///< the page written
  std::size_t plots = 0;
  std::string problem; ///< why there are no plots, when there are none
};

/// Throws gradwire::error when DIR holds neither summary.json nor sweep.json.
report_outcome write_report(const std::string& dir);

} // namespace gradwire::scheduler
