#pragma once
/// @file emulated_link.hpp
/// Link emulation: a link that delays every frame as a slower network
/// would, around any other link (UCX or in-process). A frame to a peer
/// leaves once the link to that peer is free and has carried its bytes at
/// `bandwidth_gbps`, and arrives `latency_us` later; frames to one peer
/// stay in order. Lets one machine study slow or uneven networks
/// ([transport] latency_us, bandwidth_gbps). With link faults
/// (link_faults.hpp) it also delays or holds frames for a while; frames to
/// a peer that no fault touches and that has none queued go straight to
/// the inner link (by reference where it may) while no shape is set.

#include "transport/link.hpp"
#include "transport/link_faults.hpp"

#include <memory>

namespace gradwire::transport {

struct link_shape {
  double latency_us = 0;     ///< one way, per frame
  double bandwidth_gbps = 0; ///< per peer link, gigabits/s (0: unlimited)
  /// Faults switched on while the job runs ([[faults]] delay, drop, partition).
  std::shared_ptr<link_faults> faults;
  bool shaped() const { return latency_us > 0 || bandwidth_gbps > 0; }
  bool active() const { return shaped() || faults != nullptr; }
};

/// Wraps `inner` (connected, not started).
std::unique_ptr<link> emulate(std::unique_ptr<link> inner, link_shape shape);

} // namespace gradwire::transport
