#pragma once
/// @file codec.hpp
/// Actor messages <-> wire frames. A frame is a Cap'n Proto header (the
/// message's elements, typed, with tensors replaced by indices: wire.capnp)
/// plus one data frame holding every tensor's floats back to back. A
/// message with one tensor sends that tensor's own buffer (zero-copy);
/// several are packed into one buffer. Tensors cross as flat float32.
///
/// Element types that cross: atoms, int32, int64, uint64 (size_t), float,
/// double, bool, std::string, tensors (actors::slice), actor handles,
/// vectors of actor handles, actors::pieces, vectors of int64,
/// actors::step_metrics and actors::worker_report. Anything
/// else is refused at the sender with the type's name.
///
/// decode() trusts nothing: a frame that is garbage, truncated, over a
/// limit, carries the wrong job token or disagrees with its data frame
/// throws frame_error and leaves no state behind.

#include "kernels/error.hpp"
#include "kernels/tensor.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradwire::transport {

/// An actor as the wire names it: (rank, slot). rank -1: an invalid handle.
struct actor_ref {
  int rank = -1;
  std::uint32_t slot = 0;
};

struct frame_limits {
  std::size_t max_header_bytes = std::size_t{16} << 20; ///< 16 MiB (a final report lists every push's staleness)
  std::size_t max_data_bytes = std::size_t{1} << 31;    ///< 2 GiB
  std::size_t max_values = 256;
};

class frame_error : public error {
public:
  using error::error;
};

constexpr std::uint32_t frame_magic = 0x47574831; // "GWH1"

/// FNV-1a of the job token: what every frame carries.
std::uint64_t token_hash(const std::string& token);

struct encoded_frame {
  std::vector<std::uint64_t> header; ///< Cap'n Proto words (8-byte aligned)
  kernels::tensor data;              ///< every tensor of the message; undefined when none
};

struct frame_context {
  std::uint64_t token = 0; ///< token_hash of the job token
  int rank = 0;            ///< this process
  frame_limits limits;
};

/// What a frame is: a one-way message, a request (request_id != 0), or
/// the reply or error reply to request `request_id`.
enum class frame_kind : std::uint8_t { message = 0, reply = 1, error_reply = 2 };

/// Encodes `msg` for the actor in slot `dst`; `ref` names actor handles.
encoded_frame encode(const caf::message& msg, const frame_context& ctx, std::uint32_t dst, actor_ref sender,
                     const std::function<actor_ref(const caf::actor&)>& ref, std::uint64_t request_id = 0,
                     frame_kind kind = frame_kind::message);

struct decoded_frame {
  int src = -1;
  std::uint32_t dst = 0;
  actor_ref sender;
  std::uint64_t request_id = 0;
  frame_kind kind = frame_kind::message;
  caf::message msg;
};

/// Decodes a frame received from `peer`; `resolve` turns wire references
/// into handles (local actors or proxies). Throws frame_error.
decoded_frame decode(const void* header, std::size_t header_bytes, const kernels::tensor& data,
                     const frame_context& ctx, int peer, const std::function<caf::actor(actor_ref)>& resolve);

} // namespace gradwire::transport
