#pragma once
/// @file link_faults.hpp
/// Faults on the links between processes, switched on while a job runs
/// (the [[faults]] kinds "delay", "drop" and "partition"): for a window of
/// time, frames this process sends to some peers are delayed, or held
/// until the window ends, as a link that is down holds them (the transport
/// is reliable: frames sent meanwhile arrive once the link is back, unless
/// the peer has cut this process off by then, and then they are dropped
/// there). Heartbeats are frames too, so a link down for longer than the
/// liveness bound makes the peers each other's lost rank.
///
/// Applied by the emulated link (emulated_link.hpp), which keeps frames to
/// one peer in order across windows.

#include <chrono>
#include <mutex>
#include <vector>

namespace gradwire::transport {

class link_faults {
public:
  using clock_type = std::chrono::steady_clock;

  /// From now on, for `seconds`: frames to `peers` arrive `delay_ms` later,
  /// or (down) not before the window ends.
  void impair(const std::vector<int>& peers, double seconds, double delay_ms, bool down);

  /// The earliest a frame to `peer`, due at `due` (sent at `now`), may
  /// arrive under the windows open at `now`.
  clock_type::time_point hold(int peer, clock_type::time_point now, clock_type::time_point due);

  /// Whether no window open at `now` touches `peer`.
  bool quiet(int peer, clock_type::time_point now);

private:
  struct window {
    std::vector<int> peers;
    clock_type::time_point from, until;
    clock_type::duration delay{};
    bool down = false;
    bool covers(int peer) const;
  };
  std::mutex mu_;
  std::vector<window> windows_;
  void expire(clock_type::time_point now);
};

} // namespace gradwire::transport
