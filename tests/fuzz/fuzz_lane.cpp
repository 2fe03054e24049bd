// Fuzz target: what a peer can send the collective communicator's TCP
// lanes. Input byte 0 picks the surface, the rest is the peer's bytes:
//   0: a lane's stream (transport/tcp_lanes.hpp), written into one end of
//      a socket pair and read by a receive of 64 floats that adds into a
//      sum as bytes land: the header must be the one expected, and
//      nothing may be written past the buffer or the sum;
//   1: a lane address (tcp_lanes::parse);
//   2: a communicator address (comm_detail::unpack).
// Every refusal is a gradwire::error.
#include "fuzz_target.hpp"
#include "kernels/error.hpp"
#include "transport/comm_address.hpp"
#include "transport/tcp_lanes.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

using namespace gradwire;
using namespace gradwire::transport;

namespace {
std::int64_t accepted = 0, refused = 0;
constexpr std::size_t floats = 64;

std::vector<std::uint8_t> with(std::uint8_t surface, const std::vector<std::uint8_t>& body) {
  std::vector<std::uint8_t> out(body.size() + 1);
  out[0] = surface;
  std::copy(body.begin(), body.end(), out.begin() + 1);
  return out;
}

std::vector<std::uint8_t> message(std::uint32_t seq, std::uint16_t step, std::uint64_t bytes) {
  std::vector<std::uint8_t> out(sizeof(lane_header));
  const lane_header h{seq, step, 0x4c47, bytes};
  std::memcpy(out.data(), &h, sizeof h);
  for (std::uint64_t i = 0; i < bytes; ++i)
    out.push_back(static_cast<std::uint8_t>(i * 7));
  return out;
}

void read_stream(const std::uint8_t* data, std::size_t size) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    return;
  size = std::min<std::size_t>(size, 16384); // within the pair's buffer: the write never blocks
  if (size > 0 && ::write(sv[0], data, size) != static_cast<ssize_t>(size)) {
    ::close(sv[0]);
    ::close(sv[1]);
    return;
  }
  ::close(sv[0]); // the peer is done: the receive sees its end
  std::vector<float> scratch(floats + 1, 0.f), sum(floats + 1, 0.f);
  scratch[floats] = sum[floats] = 42.f; // guards
  auto op = lane_recv(sv[1], 1, scratch.data(), floats * sizeof(float), 5, 1, sum.data());
  try {
    while (!lane_advance(op)) {
    }
    ++accepted;
  } catch (const error&) {
    ++refused;
  }
  ::close(sv[1]);
  if (scratch[floats] != 42.f || sum[floats] != 42.f || op.added > floats)
    __builtin_trap();
}
} // namespace

namespace gwfuzz {
depth reached() {
  return {std::to_string(accepted) + " accepted, " + std::to_string(refused) + " refused", accepted > 0 && refused > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() {
  tcp_lanes lanes(0, 2, 7, 100);
  comm_detail::comm_address a;
  a.here = {1, 2, 3};
  a.lanes = lanes.address();
  return {with(0, message(5, 1, floats * sizeof(float))), with(0, message(5, 2, floats * sizeof(float))),
          with(0, message(5, 1, 12)), with(1, lanes.address()), with(2, comm_detail::pack(a))};
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const std::vector<std::uint8_t> body(data + 1, data + size);
  try {
    switch (data[0] % 3) {
    case 0:
      read_stream(data + 1, size - 1);
      return 0;
    case 1: {
      const auto p = tcp_lanes::parse(body, 1);
      if (p.ipv4.empty() || p.ipv4.size() > 16 || p.port == 0)
        __builtin_trap();
      break;
    }
    default: {
      const auto a = comm_detail::unpack(body, 1);
      if (a.here.size() + a.away.size() + a.lanes.size() + 20 > body.size())
        __builtin_trap();
    }
    }
    ++accepted;
  } catch (const error&) {
    ++refused;
  }
  return 0;
}
