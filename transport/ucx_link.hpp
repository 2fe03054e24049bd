#pragma once
/// @file ucx_link.hpp
/// The link over UCX active messages (implemented across
/// ucx_link.cpp, ucx_receive.cpp, ucx_progress.cpp, ucx_setup.cpp and
/// shm_lending.cpp; ucx_link_impl.hpp holds the shared state). One UCX context and worker per
/// process (single-thread mode behind one lock: a sender posts directly
/// when the progress thread does not hold it, else the frame is queued for
/// the progress loop), one endpoint per peer, created from the peer's
/// worker address (so pairs on one node use shared memory and others TCP
/// or InfiniBand: a sockaddr connection would be TCP only). Endpoints do
/// not use peer error-handling mode (in UCX 1.13 it rules out shared
/// memory); failed sends reach handlers::peer_error, and node.hpp's
/// heartbeats find peers that die silently.
///
/// A progress thread drives the worker: it polls while there is traffic,
/// spins `spin_us` after the last event, then sleeps on the worker's event
/// file descriptor (woken by the network or by a local send). Frames above
/// UCX's eager limit arrive by rendezvous: the header comes first, the data
/// is fetched straight into a pooled buffer. UCX caps a rendezvous
/// header near 8 KiB: a larger header (a final report) travels at the
/// front of the data frame behind a two-word marker.

#include "kernels/tensor.hpp"
#include "transport/link.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::transport {

struct ucx_options {
  std::string tls;               ///< UCX_TLS for this context ("" = UCX's choice / environment)
  int spin_us = 50;              ///< busy-poll this long after the last event before sleeping
  /// Give the CPU up (sched_yield) between polls of the busy-poll: for
  /// ranks that share CPUs (as OpenMPI's mpi_yield_when_idle), where a
  /// poller that sleeps must be woken through the kernel at every message
  /// and one that spins holds a CPU another rank needs.
  bool spin_yield = false;
  int pin_cpu = -1;              ///< pin the progress thread to this CPU (-1: let the OS place it)
  /// The progress thread's nice value (0: the process's own; up to 19).
  /// Where the application's threads poll the link themselves while they
  /// wait (ring workers with spin_wait), the progress thread only delivers
  /// what arrives while they compute; at the workers' priority, each of its
  /// wake-ups (one per incoming frame) preempts a worker instead
  /// (bench/RESULTS.md, "Measured effects": the progress thread at nice 19).
  int progress_nice = 0;
  /// false: no progress thread; the application drives the link with
  /// poll() (MPI style). Tests use it to make every delivery a polled one.
  bool progress_thread = true;
  /// Tensors a sender may lend (link::send's may_reference: ring chunks,
  /// pushes, snapshots, replies) travel between processes on one node as
  /// references into the sender's shared memory (shm_lending.hpp): this
  /// process's tensors from min_ref_bytes up can be allocated there
  /// (arena_allocator), in an arena of arena_bytes (sparse; full: the heap,
  /// and frames copied).
  bool shm_refs = false;
  std::size_t arena_bytes = std::size_t{4} << 30;
  std::size_t min_ref_bytes = std::size_t{64} << 10;
  /// The job token's hash (transport::token_hash): the shared-memory
  /// protocol's control frames carry it and are refused without it.
  std::uint64_t token_hash = 0;
  std::size_t max_header_bytes = std::size_t{16} << 20;
  std::size_t max_data_bytes = std::size_t{1} << 31;
  /// Size of an element of UCX's shared-memory receive FIFOs (posix and
  /// sysv; UCX's default is 128, 0 leaves UCX's choice, and an
  /// UCX_POSIX/SYSV_FIFO_ELEM_SIZE in the environment wins). A frame
  /// whose header fits in an element travels inside it (UCX's "short"
  /// path); a larger one is copied into an 8 KiB receive descriptor
  /// instead, whose pages each sender faults in on first touch. A ring
  /// chunk sent by reference is a header of about 320 bytes: at 128 its descriptors
  /// take 4 ranks on 2 CPUs ~150 allreduces of 256 KiB (~1,300 page
  /// faults) to warm up; at 512 it goes inline.
  std::size_t fifo_elem_bytes = 512;
  /// Further UCX settings for this context only (e.g. {"RNDV_THRESH",
  /// "256k"}); a setting the user made in the environment (UCX_<NAME>) wins.
  std::vector<std::pair<std::string, std::string>> ucx_config;
};

class ucx_link final : public link {
public:
  ucx_link(int rank, int size, ucx_options opts = {});
  ~ucx_link() override;

  /// This worker's address, for the rendezvous.
  std::vector<std::uint8_t> address() const;
  /// Why a joining peer's address (address() of its link) is unusable, or
  /// "": the envelope, and UCX's own parser run where its abort cannot
  /// reach this process. For rendezvous_options::check_address (FIFO sizes
  /// are checked by connect, on both sides).
  std::string check_address(const std::vector<std::uint8_t>& blob) const;
  /// Connects to every peer; `addresses[r]` is rank r's worker address.
  void connect(const std::vector<std::vector<std::uint8_t>>& addresses);
  void reconnect(int peer, const std::vector<std::uint8_t>& address) override;

  int rank() const override;
  int size() const override;
  void start(handlers h) override;
  void send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool may_reference = false) override;
  void close(int timeout_ms) override;
  std::string describe() const override;
  bool poll() override;
  /// Tensors lent to peers as shared-memory references, not yet released.
  std::size_t lent() const;
  /// References lent to each rank so far, by rank (0 for every rank on
  /// another host: references never cross a host).
  std::vector<std::uint64_t> referenced_by_peer() const;
  /// Frames sent as shared-memory references so far.
  std::uint64_t referenced() const;
  /// Peers on this node that have mapped this process's arena.
  int peers_mapped() const;
  /// The host allocator that places this process's tensors of
  /// min_ref_bytes and up in its shared-memory arena, so they can be lent
  /// (empty when shm_refs is off or no peer shares the node; valid after
  /// connect). The link does not install it: the code that sets up the
  /// job does (transport::arena_allocation), once, for the process.
  kernels::host_allocator arena_allocator() const;

  struct impl;

private:
  std::unique_ptr<impl> p_;
};

} // namespace gradwire::transport
