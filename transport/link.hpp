#pragma once
/// @file link.hpp
/// The small interface between remote actor proxies and a transport: one
/// process's connection to every other process of the job. It moves
/// frames (a header of 8-byte words and one data frame of floats) and
/// knows nothing of actors. Implementations: ucx_link (shared memory, TCP,
/// InfiniBand through UCX) and inproc_link (threads in one process, for
/// tests).

#include "kernels/error.hpp"
#include "kernels/tensor.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradwire::transport {

class link {
public:
  struct handlers {
    /// A frame arrived (on the link's receive thread). `data` is a pooled
    /// buffer the receiver may keep; it is undefined when the frame has none.
    std::function<void(const void* header, std::size_t header_bytes, kernels::tensor data)> receive;
    /// A peer failed or went away (once per peer).
    std::function<void(int peer, const std::string& what)> peer_error;
    /// A frame was rejected before decoding (over a limit, malformed).
    std::function<void(const std::string& what)> rejected;
  };

  virtual ~link() = default;
  link() = default;
  link(const link&) = delete;
  link& operator=(const link&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Starts delivering frames to `h`; call once, before the first send.
  virtual void start(handlers h) = 0;
  /// Sends a frame to `peer` (never this rank), from any thread. `data`
  /// (may be undefined) is kept alive until the transport is done with it.
  /// `may_reference`: the receiver only reads `data`, so a link may hand it
  /// a read-only view of the sender's memory instead of a copy
  /// (ucx_options::shm_refs; the sender's reference is then held until the
  /// receiver lets go).
  virtual void send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool may_reference = false) = 0;
  /// Waits (up to `timeout_ms`) for every send to complete, then stops.
  /// From then on no handler runs: a send that did not complete in time is
  /// dropped without a peer_error, since its owner may be going away. A
  /// second close does nothing.
  virtual void close(int timeout_ms) = 0;
  /// What carries the frames, for logs ("ucx: posix, tcp").
  virtual std::string describe() const = 0;
  /// Moves the transport on from the calling thread (frames delivered from
  /// here run their handlers here), if no other thread is doing so; for a
  /// thread that would otherwise spin waiting for a frame. Returns whether
  /// anything happened. Links with nothing to drive return false.
  virtual bool poll() { return false; }
  /// The job has given up on `peer`: frames to it still held here (by
  /// link emulation or injected link faults) are dropped, not delivered to
  /// a process that may be gone. Later sends go as usual.
  virtual void forget(int /*peer*/) {}
  /// `peer`'s process was replaced (a restart that rejoins the job): its
  /// frames go to the new process at `address` (as the rendezvous gave it)
  /// from here on. Throws gradwire::error where the link cannot (in one
  /// process there are no processes to replace).
  virtual void reconnect(int peer, const std::vector<std::uint8_t>& /*address*/) {
    throw error(describe() + ": rank " + std::to_string(peer) + "'s process cannot be replaced on this link");
  }
};

} // namespace gradwire::transport
