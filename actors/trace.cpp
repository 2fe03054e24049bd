#include "actors/trace.hpp"

#include <algorithm>

namespace gradwire::actors {

trace_track::trace_track(std::string name, std::size_t capacity)
    : name_(std::move(name)), capacity_(std::max<std::size_t>(1, capacity)) {}

void trace_track::span(const char* name, time_point begin, time_point end, std::int64_t arg) {
  trace_span s{name, std::chrono::duration_cast<std::chrono::nanoseconds>(begin.time_since_epoch()).count(),
               std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count(), arg};
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.size() < capacity_) {
    ring_.push_back(s);
  } else {
    ring_[next_] = s;
    next_ = (next_ + 1) % capacity_;
  }
  ++total_;
}

std::vector<trace_span> trace_track::spans(std::uint64_t* dropped) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<trace_span> out;
  out.reserve(ring_.size());
  for (std::size_t i = 0; i < ring_.size(); ++i)
    out.push_back(ring_[(next_ + i) % ring_.size()]);
  if (dropped)
    *dropped = total_ - ring_.size();
  return out;
}

trace_track* tracer::track(std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  tracks_.emplace_back(std::move(name), capacity_);
  return &tracks_.back();
}

std::vector<const trace_track*> tracer::tracks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const trace_track*> out;
  for (const auto& t : tracks_)
    out.push_back(&t);
  return out;
}

} // namespace gradwire::actors
