#pragma once
/// @file peer_watch.hpp
/// One process's liveness thread (transport::liveness): every
/// `heartbeat_ms` it has a heartbeat sent to each live peer, and a peer
/// with no frame for `peer_timeout_ms` is reported silent, once. The node
/// owns it and says what a beat, a peer already down and a silent peer
/// are (node.cpp).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace gradwire::transport {

/// Liveness: every process sends a heartbeat frame to every peer each
/// `heartbeat_ms`; a peer silent for `peer_timeout_ms` is reported down,
/// for good: if it was only stalled (or behind a link that was down) and
/// comes back, its frames are dropped. Rank 0 sends every peer it reports
/// down a fence frame; a rank that receives one reports rank 0 down (and
/// so leaves the job) instead of waiting for peers that went on without it.
struct liveness {
  int heartbeat_ms = 200;
  int peer_timeout_ms = 5000;
};

class peer_watch {
public:
  struct hooks {
    std::function<bool(int rank)> down;                         ///< reported down already: neither beaten nor judged
    std::function<void(int rank, const std::string& why)> silent; ///< no frame for the timeout
    std::function<void(int rank)> beat;                         ///< send it a heartbeat frame
  };

  /// Every rank counts as heard now.
  peer_watch(int ranks, int self);
  ~peer_watch() { stop(); }
  peer_watch(const peer_watch&) = delete;
  peer_watch& operator=(const peer_watch&) = delete;

  /// A frame from `rank` (in range) arrived now; any thread.
  void heard(int rank);
  /// Every rank counts as heard now, and the thread starts; hooks run on it.
  void start(liveness live, hooks h);
  /// Stops and joins the thread (idempotent).
  void stop();

  /// Steady-clock milliseconds.
  static std::int64_t now_ms();

private:
  void run(liveness live, const hooks& h);
  /// This process did not run for a while: every peer gets a fresh timeout.
  void after_own_stop(const liveness& live);

  int ranks_, self_;
  std::unique_ptr<std::atomic<std::int64_t>[]> heard_; ///< per rank: ms of the last frame
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

} // namespace gradwire::transport
