#include "scheduler/app/plot.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace gradwire::scheduler {
namespace {

/// A gnuplot double-quoted string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += (c == '\n' ? ' ' : c);
  }
  return out + "\"";
}

/// A shell single-quoted word.
std::string shell_word(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

} // namespace

std::string find_gnuplot() {
  if (const char* env = std::getenv("GRADWIRE_GNUPLOT"))
    return ::access(env, X_OK) == 0 ? std::string(env) : std::string();
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    const auto p = (d.empty() ? std::string(".") : d) + "/gnuplot";
    if (::access(p.c_str(), X_OK) == 0)
      return p;
  }
  return {};
}

namespace {

/// Whether (x, y) can be drawn on p's axes (finite; positive on a log axis).
bool drawable(const plot_spec& p, double x, double y) {
  return std::isfinite(x) && std::isfinite(y) && (!p.log_y || y > 0) && (!p.log_x || x > 0);
}

/// Each series of `p` as a data block in `gp` (numbered from `block`) and
/// the plot clause that draws it; empty where no point can be drawn.
std::vector<std::string> data_blocks(const plot_spec& p, std::string& gp, int& block) {
  std::vector<std::string> parts;
  int colour = 0;
  for (const auto& s : p.series) {
    std::size_t finite = 0;
    for (const auto& [x, y] : s.xy)
      finite += drawable(p, x, y);
    if (finite == 0)
      continue;
    const bool banded = s.band.size() == s.xy.size();
    const auto name = fmt::format("$d{}", block++);
    gp += name + " << EOD\n";
    for (std::size_t i = 0; i < s.xy.size(); ++i) {
      const auto [x, y] = s.xy[i];
      if (drawable(p, x, y))
        gp += banded ? fmt::format("{:.9g} {:.9g} {:.9g} {:.9g}\n", x, y, s.band[i].first, s.band[i].second)
                     : fmt::format("{:.9g} {:.9g}\n", x, y);
    }
    gp += "EOD\n";
    // One point is drawn as a point: a line through it would not show.
    const char* with = p.how == plot_spec::style::boxes         ? "boxes fs transparent solid 0.5"
                       : p.how == plot_spec::style::points || finite == 1 ? "points pt 7 ps 0.8"
                       : p.how == plot_spec::style::linespoints ? "linespoints lw 2 pt 7 ps 0.6"
                                                                 : "lines lw 1.5";
    ++colour;
    if (banded)
      parts.push_back(fmt::format("{} using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc {} notitle",
                                  name, colour));
    parts.push_back(fmt::format("{} using 1:2 with {} lc {} title {}", name, with, colour, quoted(s.title)));
  }
  return parts;
}

/// The settings of one plot: its key, titles, axes, ranges, bars and marks.
std::string plot_settings(const plot_spec& p, const std::string& file) {
  std::size_t longest = 0;
  for (const auto& s : p.series)
    longest = std::max(longest, s.title.size());
  std::string gp = std::string("reset\nset grid\n") + (longest > 32 ? "set key below\n" : "set key outside right top\n") +
                   "set border 3\nset tics nomirror\n"; // reset keeps the data blocks
  gp += "set output " + quoted(file) + "\n";
  gp += "set title " + quoted(p.title) + "\nset xlabel " + quoted(p.xlabel) + "\nset ylabel " + quoted(p.ylabel) + "\n";
  if (p.log_y)
    gp += "set logscale y\n";
  if (p.log_x)
    gp += "set logscale x\n";
  if (p.x_tic > 0)
    gp += fmt::format("set xtics {}\n", p.x_tic);
  if (p.y_min != 0 || p.y_max != 0)
    gp += fmt::format("set yrange [{}:{}]\n", p.y_min, p.y_max);
  else if (p.how == plot_spec::style::boxes && !p.log_y) // bars are read from 0
    gp += "set yrange [0:*]\n";
  if (p.x_from)
    gp += fmt::format("set xrange [{}:*]\n", p.x_min);
  if (p.how == plot_spec::style::boxes)
    gp += (p.box_width > 0 ? fmt::format("set boxwidth {} absolute\n", p.box_width) : std::string("set boxwidth 0.8 relative\n")) +
          "set style fill solid 0.5\n";
  for (const auto& [x, label] : p.marks)
    gp += fmt::format("set arrow from {0}, graph 0 to {0}, graph 1 nohead dashtype 2 linecolor rgb \"#c0392b\"\n"
                      "set label {1} at {0}, graph 0.97 right offset -0.5,0 textcolor rgb \"#c0392b\"\n",
                      x, quoted(label));
  return gp;
}

} // namespace

plot_outcome draw_plots(const std::string& dir, const std::vector<plot_spec>& plots) {
  plot_outcome out;
  const auto gnuplot = find_gnuplot();
  if (gnuplot.empty()) {
    out.problem = "no plots: gnuplot not found (install it: sudo apt-get install gnuplot-nox)";
    return out;
  }
  std::filesystem::create_directories(dir);
  std::string gp = "set terminal svg size 720,400 dynamic font \"sans,11\" background \"#ffffff\"\n"
                   "set termoption noenhanced\nset grid\nset key outside right top\nset border 3\nset tics nomirror\n";
  std::vector<std::string> files;
  int block = 0;
  for (const auto& p : plots) {
    const auto parts = data_blocks(p, gp, block);
    if (parts.empty())
      continue;
    const auto file = dir + "/" + p.name + ".svg";
    gp += plot_settings(p, file);
    std::string cmd = "plot ";
    for (std::size_t i = 0; i < parts.size(); ++i)
      cmd += (i ? ", " : "") + parts[i];
    if (p.ideal_diagonal)
      cmd += ", x with lines dt 2 lc rgb \"#888888\" title \"ideal\"";
    gp += cmd + "\nunset output\n";
    files.push_back(file);
  }
  if (files.empty()) {
    out.problem = "no plots: no data to draw";
    return out;
  }
  const auto script = dir + "/plot.gp";
  std::ofstream(script) << gp;
  const auto log = dir + "/gnuplot.log";
  const int rc = std::system((shell_word(gnuplot) + " " + shell_word(script) + " >" + shell_word(log) + " 2>&1").c_str());
  if (rc != 0) {
    out.problem = "gnuplot failed (exit " + std::to_string(rc) + "); see " + log;
    return out;
  }
  for (const auto& f : files)
    if (std::filesystem::exists(f) && std::filesystem::file_size(f) > 0)
      out.files.push_back(f);
  return out;
}

} // namespace gradwire::scheduler
