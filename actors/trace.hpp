#pragma once
/// @file trace.hpp
/// Spans per actor for trace.json (Chrome trace / Perfetto): a worker's
/// compute, exchange, wait and apply; a shard's apply; a ring's send,
/// reduce and wait. Each actor writes to its own track, a ring buffer of
/// its last `capacity` spans, so a trace stays bounded however long the
/// run (the oldest spans go first; the count dropped is kept). A span costs
/// an uncontended lock and a store: well under a microsecond, against steps
/// of milliseconds.
///
/// Span names are string literals (never copied). Timestamps are
/// steady_clock, so processes on one machine share a time line.

#include "actors/virtual_clock.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gradwire::actors {

struct trace_span {
  const char* name = "";
  std::int64_t begin_ns = 0, end_ns = 0; ///< steady_clock since its epoch
  std::int64_t arg = -1;                 ///< step, round or rank (-1: none)
};

class trace_track {
public:
  using time_point = std::chrono::steady_clock::time_point;
  trace_track(std::string name, std::size_t capacity);
  void span(const char* name, time_point begin, time_point end, std::int64_t arg = -1);
  const std::string& name() const { return name_; }
  /// The kept spans, oldest first, and how many were overwritten.
  std::vector<trace_span> spans(std::uint64_t* dropped = nullptr) const;

private:
  std::string name_;
  mutable std::mutex mu_;
  std::vector<trace_span> ring_;
  std::size_t capacity_, next_ = 0;
  std::uint64_t total_ = 0;
};

/// The tracks of one process.
class tracer {
public:
  explicit tracer(std::size_t spans_per_track = 20000) : capacity_(spans_per_track) {}
  /// A new track (thread-safe); it lives as long as the tracer.
  trace_track* track(std::string name);
  std::vector<const trace_track*> tracks() const;
  std::size_t capacity() const { return capacity_; }

private:
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::deque<trace_track> tracks_;
};

/// What an actor holds: the tracer (kept alive) and its track; both null
/// when tracing is off, and then span() does nothing.
struct trace_ref {
  std::shared_ptr<tracer> owner;
  trace_track* track = nullptr;
  const virtual_clock* clock = nullptr; ///< virtual time: spans on its clock
  static trace_ref open(const std::shared_ptr<tracer>& t, std::string name, const virtual_clock* clock = nullptr) {
    return t ? trace_ref{t, t->track(std::move(name)), clock} : trace_ref{};
  }
  trace_track::time_point now() const { return now_on(clock); }
  void span(const char* name, trace_track::time_point begin, trace_track::time_point end, std::int64_t arg = -1) const {
    if (track)
      track->span(name, begin, end, arg);
  }
  /// A span from `begin` to now.
  void since(const char* name, trace_track::time_point begin, std::int64_t arg = -1) const {
    if (track)
      track->span(name, begin, now(), arg);
  }
  explicit operator bool() const { return track != nullptr; }
};

/// Traces its own lifetime as one span (for handlers with several returns).
class trace_scope {
public:
  trace_scope(const trace_ref& r, const char* name, std::int64_t arg = -1)
      : r_(r), name_(name), arg_(arg), t0_(r ? r.now() : trace_track::time_point{}) {}
  ~trace_scope() { r_.since(name_, t0_, arg_); }
  trace_scope(const trace_scope&) = delete;
  trace_scope& operator=(const trace_scope&) = delete;

private:
  const trace_ref& r_;
  const char* name_;
  std::int64_t arg_;
  trace_track::time_point t0_;
};

} // namespace gradwire::actors
