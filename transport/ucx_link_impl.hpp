#pragma once
/// @file ucx_link_impl.hpp
/// The state of a ucx_link (internal to transport/), shared by the files
/// that implement it:
///   ucx_link.cpp      opening, connecting, sending, closing;
///   ucx_receive.cpp   arriving frames: limits, rendezvous fetches, the
///                     ready queue the handler is run from;
///   ucx_progress.cpp  who drives the worker: the progress thread's loop
///                     and poll() from an application thread;
///   shm_lending.cpp   the shared-memory lending protocol it carries.

#include "transport/buffer_pool.hpp"
#include "transport/shm_lending.hpp"
#include "transport/ucx_link.hpp"
#include "transport/ucx_setup.hpp"

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace gradwire::transport {

/// The one active-message id gradwire registers.
constexpr unsigned ucx_am_id = 7;
/// A header larger than this travels at the front of the data frame.
constexpr std::size_t ucx_max_am_header = 4096;
/// [inline_marker, header bytes]: the header is at the front of the data.
constexpr std::uint64_t ucx_inline_marker = 0x4757494e4c494e45ull; // "GWINLINE"

struct ucx_link::impl {
  /// A send in flight: what must stay alive until UCX is done with it.
  struct pending_send {
    impl* link;
    std::vector<std::uint64_t> header;
    kernels::tensor data;
    int peer;
  };
  /// A rendezvous frame whose data is still to be fetched.
  /// A rendezvous frame's data, being fetched (shared by its place in
  /// `ready` and the receive that fills it).
  struct fetching {
    kernels::tensor buffer;
    bool complete = false, failed = false;
  };
  struct pending_recv {
    impl* link;
    void* desc;
    std::size_t length;
    std::shared_ptr<fetching> into;
  };
  /// An endpoint's error callback argument.
  struct peer_slot {
    impl* link;
    int rank;
  };
  /// A frame for the handler, held until the UCX callback that brought it
  /// has returned.
  /// A rendezvous frame holds its place (arrival order) until its data is
  /// in: frames after it wait, so a peer's frames reach the handler in the
  /// order it sent them, large or small (as CAF promises between two
  /// actors; a donor's state and the re-formed ring that needs it).
  struct ready_frame {
    std::vector<std::uint64_t> header;
    std::size_t header_bytes;
    kernels::tensor data;
    std::shared_ptr<fetching> pending; ///< a rendezvous frame's data (null: `data` is in)
  };

  int rank, size;
  ucx_options opts;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> eps;
  std::vector<ucp_ep_h> retired; ///< to processes since replaced (reconnect), under ucx_mu
  std::vector<std::unique_ptr<peer_slot>> slots;
  std::vector<std::atomic<bool>> dead;
  int efd = -1;
  std::shared_ptr<buffer_pool> pool = std::make_shared<buffer_pool>();
  handlers h;
  std::thread progress;
  std::atomic<bool> stop{false};
  std::atomic<bool> closed{false}; ///< close() has begun its teardown: no handler runs now
  std::atomic<long> in_flight{0}; ///< queued or posted, not complete
  /// Posted to UCX and not complete (under ucx_mu): what UCX drops
  /// without a callback at the end (a rendezvous frame its stalled peer
  /// never fetched) is freed by the link's destructor.
  std::set<pending_send*> posted;
  std::mutex queue_mu;
  std::vector<std::unique_ptr<pending_send>> queue; ///< sends from other threads, posted by the driving thread
  std::atomic<int> queued{0};
  /// UCX runs in single-thread mode; this lock makes it one thread at a
  /// time: the progress thread (released while it sleeps), a polling
  /// thread, and senders that post directly.
  std::mutex ucx_mu;
  std::vector<pending_recv*> rndv; ///< under ucx_mu
  std::deque<ready_frame> ready; ///< under ucx_mu, in arrival order
  /// Some thread polled within the last ~100 us (poll_once): a direct send
  /// then need not wake the progress thread.
  std::atomic<std::int64_t> last_poll_ns{0};
  std::unique_ptr<shm_lending> lending;
  std::string fifo; ///< this worker's shared-memory FIFO element sizes (ucx_setup::open)

  /// The link whose worker this thread is driving right now (holding
  /// ucx_mu): a send from here is queued, posted when its handler returns.
  /// (Defined here, constant-initialised: the send path reads it without a
  /// TLS wrapper call.)
  static inline thread_local const impl* driving = nullptr;

  impl(int r, int n, ucx_options o);
  void reject(const std::string& what) const {
    if (h.rejected)
      h.rejected(what);
  }

  // ucx_link.cpp: the send path.
  /// Queues a frame for the driving thread (any thread); `wake` signals it.
  void enqueue(int peer, std::vector<std::uint64_t> header, bool wake = true);
  /// Posts a send; true when it is still in progress (someone has to
  /// progress the worker), false when UCX completed it inline or it failed.
  bool post(std::unique_ptr<pending_send> ps);
  /// Posts what was queued; whether anything was.
  bool drain_queue();
  void report_peer(int peer, const std::string& what);
  /// An endpoint to rank r at `blob` (its peer_slot exists).
  ucp_ep_h open_endpoint(int r, const ucx_setup::address& blob);
  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t st);
  static void on_send_done(void* request, ucs_status_t st, void* user);

  // ucx_receive.cpp: the receive path.
  static ucs_status_t on_am(void* arg, const void* header, std::size_t header_bytes, void* data, std::size_t length,
                            const ucp_am_recv_param_t* param);
  static void on_recv_done(void* request, ucs_status_t st, std::size_t, void* user);
  void fetch_rendezvous();
  void deliver(std::vector<std::uint64_t> header, std::size_t header_bytes, kernels::tensor data);
  /// Hands the frames that arrived to the handler (under ucx_mu); whether any.
  bool run_ready();
  void deliver_now(const std::vector<std::uint64_t>& header, std::size_t header_bytes, kernels::tensor data);

  // ucx_progress.cpp: driving the worker.
  static std::int64_t now_ns();
  /// One round of progress from any thread, if the lock is free.
  bool poll_once();
  /// The progress thread's loop.
  void run();
};

} // namespace gradwire::transport
