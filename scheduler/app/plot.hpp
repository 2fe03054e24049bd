#pragma once
/// @file plot.hpp
/// Plots with gnuplot (Debian's gnuplot-nox): one script with inline data
/// blocks, one SVG per plot. gnuplot is optional: without it nothing is
/// drawn and the reason says what to install; the caller carries on.

#include <string>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

struct plot_series {
  std::string title;
  std::vector<std::pair<double, double>> xy;
  /// (low, high) at each point of xy, drawn as a shaded band behind the
  /// line (repeats: min-max over seeds); empty: none.
  std::vector<std::pair<double, double>> band{};
};

struct plot_spec {
  std::string name;  ///< file name without .svg
  std::string title, xlabel, ylabel;
  std::vector<plot_series> series;
  enum class style { lines, linespoints, points, boxes } how = style::lines;
  bool log_y = false;
  bool log_x = false; ///< points at x <= 0 are left out
  bool ideal_diagonal = false; ///< adds y = x (perfect speedup)
  double y_min = 0, y_max = 0; ///< both 0: automatic (boxes: from 0)
  bool x_from = false;         ///< the x axis starts at x_min
  double x_min = 0;
  double box_width = 0;        ///< boxes: width in x units (0: 80% of the spacing)
  double x_tic = 0;            ///< spacing of the x tics (0: automatic)
  /// Vertical dashed lines at x, labelled (a lost worker, on curves over
  /// time or steps).
  std::vector<std::pair<double, std::string>> marks{};
};

struct plot_outcome {
  std::vector<std::string> files; ///< SVG paths written, in spec order (empty series are skipped)
  std::string problem;            ///< why none were drawn, when none were
};

/// The gnuplot executable: $GRADWIRE_GNUPLOT when set, else `gnuplot` on
/// the PATH; empty when there is none.
std::string find_gnuplot();

/// Writes `dir`/plot.gp and runs gnuplot on it, making `dir`/<name>.svg.
plot_outcome draw_plots(const std::string& dir, const std::vector<plot_spec>& plots);

} // namespace gradwire::scheduler
