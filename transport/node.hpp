#pragma once
/// @file node.hpp
/// One process's view of the job: its link to the other processes, the
/// local actors it makes reachable (published in slots) and proxies for
/// remote ones. A proxy is an ordinary CAF actor: a message sent to it is
/// encoded (codec.hpp) and sent over the link to the process that holds
/// the real actor, which delivers it with a proxy of the original sender
/// as the sender. Actor handles inside messages travel as (rank, slot) and
/// arrive as proxies (or as the local actor itself on its own process), so
/// the actors of actors/ run unchanged across processes.
///
/// A proxy's enqueue encodes and hands the frame to the link on the
/// sender's own thread (no mailbox or scheduling hop); the link's receive
/// thread enqueues into the local actor's mailbox.
///
/// Requests (request/then) cross too: the request frame carries an id, the
/// receiving process delivers it with a stand-in sender that catches the
/// handler's reply (or error) and sends it back; the requester gets it as
/// the response CAF expects. Open requests to a rank that fails end with
/// an error naming the rank, and so does a request to a rank already down.

#include "transport/codec.hpp"
#include "transport/link.hpp"
#include "transport/peer_budget.hpp"
#include "transport/peer_watch.hpp"
#include "transport/rejoin.hpp"
#include "transport/slots.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gradwire::transport {

class node : public std::enable_shared_from_this<node> {
public:
  using down_fn = std::function<void(int rank, const std::string& what)>;

  /// Takes over `l` (not yet started); frames must carry `token`.
  node(caf::actor_system& sys, std::unique_ptr<link> l, const std::string& token);
  ~node();
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  /// Starts receiving; `on_down` hears of failed peers, once per peer.
  void start(down_fn on_down = {}, liveness live = {});
  int rank() const { return link_->rank(); }
  int size() const { return link_->size(); }
  const link& transport() const { return *link_; }
  /// link::poll from the calling thread: a worker waiting for a frame moves
  /// the transport on itself instead of waking its receive thread.
  bool poll() { return link_->poll(); }

  /// Makes `a` reachable from other processes as (rank(), slot).
  void publish(std::uint32_t slot, caf::actor a);
  /// The actor in `slot` of process `rank`: the local actor itself, or a proxy.
  caf::actor remote(int rank, std::uint32_t slot);

  /// Whether `rank` has been reported failed.
  bool is_down(int rank);
  /// Treats a live peer as failed (one that keeps its link alive but does
  /// no work): reported through the down callback like a lost process,
  /// and every later frame from it is dropped unread.
  void cut_off(int rank, const std::string& why);
  /// Rank `rank` was cut off (its frames are dropped) and not let back in.
  bool is_cut_off(int rank) const;
  /// Coming back after a cut, and replacing a lost process (rejoin.hpp).
  rejoin_protocol& rejoin() { return rejoin_; }
  /// Rank 0 ending the job early (an error): tells every live peer, which
  /// then leaves with `why` instead of waiting out the liveness bound.
  void fence_all(const std::string& why);
  /// Bounds the memory a peer's frames may hold here: the data of every
  /// frame from it that local actors have not yet let go of (queued in a
  /// mailbox, or kept). A peer over `bytes` is cut off (cut_off), naming
  /// the figure. 0 (default): unbounded. Set before start().
  void set_peer_budget(std::size_t bytes) { budget_.set_limit(bytes); }
  /// Bytes of `rank`'s frames held here now (0 when no budget is set).
  std::int64_t held_bytes(int rank) const { return budget_.held(rank); }
  /// Frames refused so far (bad, oversized, wrong token, unknown slot).
  std::int64_t rejected() const { return rejected_.load(); }
  /// Waits for sends in flight, then stops the link and the proxies.
  void close(int timeout_ms = 5000);
  /// The job is ending: a peer that leaves from now on is still marked
  /// down, but not reported as lost (its last frames may race its exit).
  void ending() { ending_ = true; }
  /// `peer` has done its part (its worker's final report is in): when it
  /// leaves it is marked down as any peer, but not reported as lost.
  void finished(int peer);

  /// A send that could not go out (logged, counted with rejected()).
  void note_failure(const std::string& what);
  /// Used by proxies: encode and send `msg` to (rank, slot).
  void forward(int rank, std::uint32_t slot, const caf::strong_actor_ptr& sender, const caf::message& msg);
  /// Used by proxies: a request; its reply (or error) comes back to `sender`
  /// as the response to `mid`. A rank that fails fails its open requests.
  void forward_request(int rank, std::uint32_t slot, const caf::strong_actor_ptr& sender, caf::message_id mid,
                       const caf::message& msg);
  /// Used by reply catchers: the reply to request `id` of rank `rank`.
  void send_reply(int rank, std::uint64_t id, const caf::message& reply);

private:
  friend class rejoin_protocol; // sends control frames, readmits, reconnects
  actor_ref ref_of(const caf::actor& a);
  actor_ref ref_of(const caf::strong_actor_ptr& p);
  caf::actor resolve(actor_ref r);
  void on_frame(const void* header, std::size_t bytes, kernels::tensor data);
  /// on_frame's steps: the reply to one of this rank's requests; a fence
  /// (the sender cut this rank off); a message for a published actor.
  void on_reply(decoded_frame& f);
  void on_fence(const decoded_frame& f);
  void deliver(decoded_frame& f);
  void reject(const std::string& what);

  caf::actor_system& sys_;
  std::unique_ptr<link> link_;
  frame_context ctx_;
  std::mutex mu_;
  std::map<std::uint32_t, caf::actor> published_;
  std::map<caf::actor_addr, std::uint32_t> slot_of_;
  std::uint32_t next_slot_ = slots::dynamic_base; ///< slots for actors named only inside messages
  std::map<std::pair<int, std::uint32_t>, caf::actor> proxies_;
  std::map<caf::actor_addr, actor_ref> proxy_ref_;
  std::unique_ptr<caf::execution_unit> unit_; ///< runs actors on the link's receive thread
  std::atomic<std::int64_t> rejected_{0};
  std::atomic<bool> ending_{false};
  struct pending_request {
    int rank = -1;
    caf::strong_actor_ptr sender;
    caf::message_id mid;
  };
  void answer(const pending_request& p, caf::message content);
  std::uint64_t next_request_ = 1;
  std::map<std::uint64_t, pending_request> pending_; ///< our requests awaiting replies
  std::map<int, caf::actor> catchers_;              ///< by requesting rank
  bool closed_ = false;
  down_fn on_down_;
  std::mutex down_mu_;
  std::vector<bool> down_;                          ///< reported already
  std::vector<bool> finished_;                      ///< done: leaving is expected
  /// Cut off: its frames are dropped (read, without a lock, for every frame).
  std::unique_ptr<std::atomic<bool>[]> cut_;
  peer_budget budget_; ///< per rank: its frames' bytes still held here (peer_budget.hpp)
  peer_watch watch_;   ///< heartbeats, and peers silent for too long (peer_watch.hpp)
  /// What the watch's thread does with a peer (start()).
  peer_watch::hooks watch_hooks();
  void peer_down(int peer, const std::string& what);
  /// Steady-clock milliseconds (heartbeats, knocks).
  static std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
  }
  /// A frame on the fence slot to `peer`: a fence (`why`), or a rejoin
  /// control frame (rejoin.hpp). Not once closed; a failed link is no error.
  void control(int peer, const caf::message& msg);
  void fence(int peer, const std::string& why);
  /// Hears `peer` again (no longer down or cut off).
  void readmit(int peer);
  rejoin_protocol rejoin_{*this};
};

} // namespace gradwire::transport
