// Fuzz target: the wire codec's decoder, as a node runs it on every frame
// from a peer. Input: byte 0 = how many floats the data frame holds (0:
// none), the rest = the Cap'n Proto header. decode() must throw
// frame_error or gradwire::error on anything it does not accept, and
// never read outside the header or the data.
#include "actors/messages.hpp"
#include "fuzz_target.hpp"
#include "transport/codec.hpp"

#include <cstring>

using namespace gradwire;
using namespace gradwire::transport;

namespace {

frame_context context() {
  frame_context c;
  c.token = token_hash("fuzz");
  c.rank = 0;
  c.limits.max_data_bytes = std::size_t{1} << 20;
  c.limits.max_header_bytes = std::size_t{1} << 20;
  return c;
}

actors::slice ramp(std::int64_t n) {
  auto t = actors::slice::empty({n});
  for (std::int64_t i = 0; i < n; ++i)
    t.data()[i] = static_cast<float>(i);
  return t;
}

std::vector<std::uint8_t> frame_bytes(const caf::message& msg, std::uint64_t request = 0,
                                      frame_kind kind = frame_kind::message) {
  auto c = context();
  c.rank = 1;
  auto f = encode(msg, c, 4096, {1, 10}, [](const caf::actor&) { return actor_ref{}; }, request, kind);
  std::vector<std::uint8_t> out(1 + f.header.size() * 8);
  out[0] = static_cast<std::uint8_t>(f.data.defined() ? f.data.numel() : 0);
  std::memcpy(out.data() + 1, f.header.data(), f.header.size() * 8);
  return out;
}

} // namespace

namespace {
std::int64_t decoded = 0, refused = 0;
}

namespace gwfuzz {
depth reached() {
  return {std::to_string(decoded) + " decoded, " + std::to_string(refused) + " refused", decoded > 0 && refused > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() {
  actors::step_metrics m;
  m.rank = 1;
  actors::worker_report rep;
  rep.rank = 1;
  rep.staleness = {0, 1, 2};
  return {
    frame_bytes(caf::make_message(actors::push_atom::value, 1, std::int64_t{3}, std::int64_t{0}, std::int64_t{8},
                                  ramp(8))),
    frame_bytes(caf::make_message(actors::step_atom::value, 1, std::int64_t{5}, std::int64_t{320})),
    frame_bytes(caf::make_message(actors::metrics_atom::value, m)),
    frame_bytes(caf::make_message(actors::done_atom::value, rep)),
    frame_bytes(caf::make_message(actors::ring_atom::value, std::int32_t{-7}, std::uint64_t{9}, 1.5f, 2.25, true,
                                  std::string("hello"), actors::pieces{{5, ramp(3)}, {100, ramp(4)}},
                                  std::vector<std::int64_t>{3, -1, 4}, std::vector<caf::actor>{caf::actor{}})),
    frame_bytes(caf::make_message(std::string("an error")), 7, frame_kind::error_reply),
    frame_bytes(caf::make_message(std::int64_t{2}, ramp(16)), 8, frame_kind::reply),
  };
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const frame_context ctx = context();
  if (size == 0)
    return 0;
  const std::int64_t floats = data[0];
  std::vector<std::uint64_t> header((size - 1 + 7) / 8);
  if (size > 1)
    std::memcpy(header.data(), data + 1, size - 1);
  kernels::tensor payload;
  if (floats > 0)
    payload = ramp(floats);
  try {
    auto f = decode(header.data(), size - 1, payload, ctx, 1, [](actor_ref) { return caf::actor{}; });
    decoded += f.msg.size() > 0;
  } catch (const error&) { // frame_error, or gradwire::error from a tensor's own checks
    ++refused;
  }
  return 0;
}
