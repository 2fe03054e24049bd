#pragma once
/// @file progress.hpp
/// The live progress line on stderr: epoch, step, samples/s, loss, ETA.
/// On a terminal it redraws in place a few times a second; otherwise (a log
/// file, CI) it prints a plain line every `quiet_interval` seconds.

#include <chrono>
#include <mutex>
#include <string>

namespace gradwire::scheduler {

class progress_line {
public:
  explicit progress_line(bool enabled = true, double quiet_interval = 10.0);
  /// Redraws if enough time has passed (or `force`).
  void update(int epoch, int epochs, std::int64_t step, std::int64_t total_steps,
              double samples_per_sec, double loss, bool force = false);
  /// Prints a permanent line (ends the in-place line first).
  void note(const std::string& text);
  void finish();

private:
  bool enabled_, tty_;
  double quiet_interval_;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false;
  std::mutex mu_; ///< notes come from the evaluation thread too
};

/// "1:02:03" or "2:03".
std::string format_duration(double seconds);

} // namespace gradwire::scheduler
