#pragma once
/// @file recent_mean.hpp
/// The mean of a per-step quantity over the last `span` steps, weighted by
/// each step's samples: what "final loss" reports (the last epoch's worth
/// of steps, or every step when there were fewer), instead of whatever the
/// last log window held.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

namespace gradwire::models {

class recent_mean {
public:
  explicit recent_mean(std::size_t span = 1) : span_(span == 0 ? 1 : span) {}
  /// One step: `sum` over its `samples` (a loss summed over the batch).
  void add(double sum, std::int64_t samples) {
    steps_.emplace_back(sum, samples);
    sum_ += sum;
    samples_ += samples;
    if (steps_.size() > span_) {
      sum_ -= steps_.front().first;
      samples_ -= steps_.front().second;
      steps_.pop_front();
    }
  }
  double mean() const { return samples_ > 0 ? sum_ / static_cast<double>(samples_) : 0.0; }
  std::size_t steps() const { return steps_.size(); }
  std::int64_t samples() const { return samples_; }

private:
  std::size_t span_;
  std::deque<std::pair<double, std::int64_t>> steps_;
  double sum_ = 0;
  std::int64_t samples_ = 0;
};

} // namespace gradwire::models
