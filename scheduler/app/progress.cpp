#include "scheduler/app/progress.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace gradwire::scheduler {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7)
    return "?";
  auto s = static_cast<long>(seconds + 0.5);
  if (s >= 3600)
    return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

progress_line::progress_line(bool enabled, double quiet_interval)
  : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0), quiet_interval_(quiet_interval),
    start_(std::chrono::steady_clock::now()), last_(start_) {}

void progress_line::update(int epoch, int epochs, std::int64_t step, std::int64_t total_steps,
                           double samples_per_sec, double loss, bool force) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!enabled_)
    return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (!force && since < (tty_ ? 0.2 : quiet_interval_))
    return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double frac = total_steps > 0 ? static_cast<double>(step) / static_cast<double>(total_steps) : 0;
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : -1;
  constexpr int width = 20;
  const int filled = static_cast<int>(frac * width);
  std::string bar = std::string(static_cast<std::size_t>(filled), '#') +
                    std::string(static_cast<std::size_t>(width - filled), '-');
  // epochs = 0: no epoch to show; a NaN loss: none known (e.g. actors' runs).
  auto line = fmt::format("{}[{}] {:3.0f}%  step {}/{}  {:.0f} samples/s  {}elapsed {}  ETA {}",
                          epochs > 0 ? fmt::format("epoch {}/{} ", epoch, epochs) : std::string(), bar,
                          frac * 100, step, total_steps, samples_per_sec,
                          std::isnan(loss) ? std::string() : fmt::format("loss {:.4f}  ", loss),
                          format_duration(elapsed), format_duration(eta));
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void progress_line::note(const std::string& text) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!enabled_)
    return;
  if (tty_ && drawn_)
    std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  drawn_ = false;
}

void progress_line::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (enabled_ && tty_ && drawn_)
    std::fprintf(stderr, "\n");
  drawn_ = false;
}

} // namespace gradwire::scheduler
