#pragma once
/// @file job.hpp
/// Joining a multi-process job: rank and size from the launcher's
/// environment (launch_env.hpp), a UCX link, the rendezvous that exchanges
/// worker addresses (and checks the job token), and the node that holds
/// this process's published actors and proxies.

#include "transport/launch_env.hpp"
#include "transport/emulated_link.hpp"
#include "transport/node.hpp"
#include "transport/rendezvous.hpp"
#include "transport/shm_lending.hpp"
#include "transport/ucx_comm.hpp"
#include "transport/ucx_link.hpp"

#include <caf/all.hpp>

#include <memory>
#include <string>

namespace gradwire::scheduler {

struct job_options {
  std::string tls;        ///< UCX transports ("" = UCX_TLS or UCX's choice)
  std::string rendezvous; ///< host:port ("" = environment, else 127.0.0.1:29500)
  std::string token;      ///< "" = GRADWIRE_TOKEN
  int timeout_ms = 60000; ///< rendezvous bound
  int spin_us = 0;        ///< the link's busy-poll after each event (ucx_options::spin_us)
  bool spin_yield = false; ///< yield the CPU between those polls (ucx_options::spin_yield)
  bool shm_refs = false;  ///< lendable tensors by reference into shared memory on one node (ucx_options::shm_refs)
  transport::liveness live;
  transport::link_shape shape; ///< link emulation (latency, bandwidth)
  bool pin = false;            ///< pin the progress thread to CPU (local rank mod CPUs)
  int progress_nice = 0;       ///< ucx_options::progress_nice
  /// The largest data frame a peer may send (ucx_options::max_data_bytes):
  /// derived from the job (the model's size), so a bad peer cannot make
  /// this process allocate more than the job could need. 0: the link's own
  /// bound (2 GiB).
  std::size_t max_data_bytes = 0;
  /// Rank 0: processes that may replace lost ranks in all (train.restarts);
  /// the rendezvous socket then stays open for them (transport::late_joins),
  /// and each is admitted once rank 0 has cut its rank off.
  int replacements = 0;
  /// This process replaces a lost rank's (GRADWIRE_REJOIN=1).
  bool replacing = false;
  /// Also open a collective communicator driven by the calling thread
  /// (transport::ucx_comm), its address exchanged at the same rendezvous.
  bool collective = false;
  int comm_timeout_ms = 0; ///< a peer silent this long in a collective fails it (0: timeout_ms)
  std::size_t ring_from_bytes = 0; ///< comm_options::ring_from_bytes (0: by path)
  /// The communicator's network: "auto", "ucx" or "sockets" (comm_options::net).
  std::string comm_net = "auto";
};

/// A peer whose frames hold more than this many of the largest frames at
/// once in this process (queued, or kept by actors) is cut off
/// (transport::node::set_peer_budget). Set only with max_data_bytes.
constexpr std::size_t peer_budget_frames = 8;

struct job {
  transport::launch_info launch;
  std::shared_ptr<transport::node> node; ///< not started: publish first, then start
  /// This process's large host tensors come from its shared-memory arena
  /// while the job lives (shm_refs with a peer on the node), so they can be
  /// lent to peers instead of copied.
  std::shared_ptr<transport::arena_allocation> allocation;
  transport::liveness live;              ///< for node->start
  /// Rank 0 with job_options::replacements: hellos of replacement processes
  /// (declared after `node`, so it stops first).
  std::unique_ptr<transport::late_joins> late;
  /// job_options::collective: connected to every rank.
  std::unique_ptr<transport::ucx_comm> comm;
  /// Each rank's host identity (host name, boot id, IPC namespace), by rank.
  std::vector<std::string> hosts;
  /// The UCX link inside `node` (for its counts), valid while the node lives.
  const transport::ucx_link* link = nullptr;
};

/// Connects this process to the job. Throws gradwire::error.
job join_job(caf::actor_system& sys, const job_options& opts);

/// Publishes this process's barrier actor (actors/barrier.hpp) in
/// transport::slots::barrier; call before node->start().
void publish_barrier(caf::actor_system& sys, job& j);

/// Waits until every rank has called barrier with the same epoch. Throws
/// gradwire::error after `timeout_ms`, naming the missing ranks on rank 0.
void barrier(caf::actor_system& sys, job& j, int epoch, int timeout_ms = 60000);

} // namespace gradwire::scheduler
