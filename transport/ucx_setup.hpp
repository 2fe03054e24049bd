#pragma once
/// @file ucx_setup.hpp
/// Opening UCX for a link (internal to transport/): the context and worker
/// with the options' transports and FIFO element size, and the address a
/// rank publishes at the rendezvous (its UCX worker address and its host,
/// so peers know who shares the node). Every byte of a peer's address is
/// checked before UCX sees it.

#include "transport/ucx_link.hpp"

#include <ucp/api/ucp.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::transport::ucx_setup {

/// Throws gradwire::error "UCX: what: status" unless `st` is UCS_OK.
void check_status(ucs_status_t st, const char* what);

/// A context with active messages and wake-ups, and one single-threaded
/// worker. UCX reads the FIFO element size from the environment (UCX 1.13
/// refuses that name from ucp_config_modify): it is set here, under a
/// lock, for the shared-memory transports `opts.tls` opens, unless the
/// user set it first.
/// Returns the shared-memory FIFO element sizes the worker was opened
/// with ("posix=512 sysv=512", "" for a transport UCX picks itself):
/// ranks on one node must agree, or a send into a peer's FIFO crashes
/// inside UCX.
/// `features`: the link's active messages and wake-ups by default; the
/// collective communicator (ucx_comm.hpp) asks for tag matching.
std::string open(const ucx_options& opts, ucp_context_h& context, ucp_worker_h& worker,
                 std::uint64_t features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP);

/// UCX 1.13 creates its System V shared-memory segments (the sysv
/// transport's FIFOs) with mode 0660, open to the group: this narrows
/// every segment this process created to 0600 (a job's ranks are one
/// user). open() calls it; returns how many it changed.
int restrict_sysv_segments();

/// Whether a UCX_TLS list ("posix,cma", "sm", "^tcp", "all") opens the
/// shared-memory transport `tl` ("posix" or "sysv").
bool tls_includes(const std::string& tls, const std::string& tl);
/// The transports a context of `opts` opens: opts.tls, else UCX_TLS, else
/// "all" (UCX's choice).
std::string effective_tls(const ucx_options& opts);
/// Whether a UCX_TLS list opens TCP and no other transport that carries
/// frames between processes ("tcp", "tcp,self"; not "", "all", "^posix").
bool tls_tcp_only(const std::string& tls);
/// The settings a link whose transports are TCP alone runs with (where the
/// user's environment does not set them): frames up to 512 KiB go eagerly
/// instead of by UCX's rendezvous over TCP (a request and a reply before
/// the data), which is slower below that size and as fast from 1 MiB
/// (bench/RESULTS.md, "The link over TCP alone"). (Larger TCP segments,
/// UCX_TCP_TX/RX_SEG_SIZE, added nothing measurable on top; and UCX takes
/// a transport's settings only from the environment: through
/// ucp_config_modify it warns "invalid configurations".)
/// Per context, not per peer: on shared memory eager frames are a loss
/// (large frames many times slower; the same section), so a context that
/// also opens shared memory keeps UCX's choice.
std::vector<std::pair<std::string, std::string>> tcp_only_config();

/// What a rank's rendezvous address carries.
struct address {
  std::vector<std::uint8_t> ucx; ///< the UCX worker address
  std::string host;              ///< peers on the same host share memory
  std::string fifo;              ///< open()'s FIFO element sizes: peers on one host must agree
  /// The worker address of the rank's collective communicator
  /// (ucx_comm.hpp), when the job opened one; empty otherwise. Optional
  /// on the wire (an address without it is whole).
  std::vector<std::uint8_t> collective;
};
std::vector<std::uint8_t> pack(const address& a);
/// Throws gradwire::error naming `rank` when `in` is not a whole address.
address unpack(const std::vector<std::uint8_t>& in, int rank);
/// Why UCX cannot use a peer's worker address ("" when it parses). UCX's
/// parser asserts, aborting its process, on a malformed address: it runs
/// here in a forked child, which dies instead (bounded by 10 s).
std::string ucx_parse_check(const std::vector<std::uint8_t>& ucx);
std::string host_name();
/// What ranks must share to share memory: the host name, the kernel's boot
/// id and the IPC namespace ("name boot ID ipc:[INODE]"). Two containers
/// or namespaces on one machine with their own /dev/shm differ in it.
std::string host_identity();

} // namespace gradwire::transport::ucx_setup
