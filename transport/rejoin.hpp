#pragma once
/// @file rejoin.hpp
/// How a rank cut off while its process lives comes back (a stall or a
/// partition that outlasted the liveness bound), and how rank 0 admits a
/// replacement for a lost process: the node's rejoin protocol, a
/// collaborator it owns (node::rejoin()). Its frames are control frames
/// on the fence slot, heard even from a rank that is cut off.
///
/// The cut-off rank knock()s at rank 0; rank 0's on_knock decides (a ring
/// lets a worker back in at a step boundary it chooses), answering "heard"
/// at once so the knocker keeps waiting; readmit_everywhere(r) has every
/// rank hear r again and r hear everyone again (r's on_readmitted runs).
/// Frames dropped meanwhile stay dropped: the job's protocol (a ring's
/// re-form) brings r's state up to date. At the job's end rank 0 dismisses
/// the ranks it never let back (their on_dismissed runs).

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace gradwire::transport {

class node;

class rejoin_protocol {
public:
  explicit rejoin_protocol(node& n) : node_(n) {}

  // --- a rank that was cut off ------------------------------------------------
  /// Asks rank 0 to be let back in.
  void knock();
  /// When rank 0 last answered a knock (steady ms; 0: never): it holds the
  /// request and decides later.
  std::int64_t knock_heard_ms() const { return knock_heard_ms_.load(); }
  void set_on_readmitted(std::function<void()> f);
  void set_on_dismissed(std::function<void(const std::string&)> f);

  // --- rank 0 -------------------------------------------------------------------
  /// Who decides on knocks (empty: nobody; knocks are ignored).
  void set_on_knock(std::function<void(int rank)> f);
  bool hears_knocks();
  void readmit_everywhere(int peer);
  /// A replacement process for `peer` (lost) at the rendezvous: its frames
  /// go to the new process from here on, here and (told by rank 0, in order
  /// before anything else it sends them) on every live rank. Its knock then
  /// readmits it as above.
  void admit_process(int peer, const std::vector<std::uint8_t>& address);
  /// The largest address a replaced process may have (the rendezvous's bound).
  static constexpr std::size_t max_address_bytes = std::size_t{1} << 20;
  /// At the job's end: every rank cut off that may be knocking hears that
  /// it will not be let back in.
  void dismiss_cut_off(const std::string& why);

  /// A fence-slot control frame from `src` (knock, heard, readmit, dismiss,
  /// a replaced process's address), acted on; false: not one of these.
  bool on_control(int src, const caf::message& msg);

private:
  void on_knock(int src);
  void on_dismiss(int src, const std::string& why);
  void on_readmit(int src, int r);
  void on_new_address(int src, int r, const std::vector<std::int64_t>& packed);

  node& node_;
  std::mutex mu_; ///< the callbacks
  std::function<void(int)> on_knock_;
  std::function<void()> on_readmitted_;
  std::function<void(const std::string&)> on_dismissed_;
  std::atomic<std::int64_t> knock_heard_ms_{0};
};

} // namespace gradwire::transport
