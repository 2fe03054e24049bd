// Fuzz target: the shared-memory lending protocol's control frames
// (announce, mapped, ref, release), as rank 0 of 4 on one host receives
// them: ranks 1 and 2 share the host, rank 3 has failed. Rank 1's arena
// is real (mapped by the announcements of the seeds), so references into
// it reach the view-making code. Input: records of u16 header_bytes (bit
// 15: the frame also carries 4 data bytes) and that many header bytes.
// Every refusal is the protocol's own; nothing may read outside a
// mapping, and the deferred references stay bounded.
#include "fuzz_target.hpp"
#include "transport/codec.hpp"
#include "transport/shm_arena.hpp"
#include "transport/shm_lending.hpp"

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

using namespace gradwire;
using namespace gradwire::transport;

namespace {

constexpr std::uint64_t ref_marker = 0x475753484d524546ull, release_marker = 0x475753484d52454cull,
                        announce_marker = 0x475753484d414e4eull, mapped_marker = 0x475753484d4d4150ull;
constexpr std::size_t arena_bytes = std::size_t{1} << 20;

std::uint64_t token() { return token_hash("fuzz"); }
std::int64_t views = 0, refusals = 0;

/// Rank 1's arena: what its announcements name.
const std::string& peer_arena_name() {
  static const std::string name = "/gradwire-" + std::to_string(::getpid()) + "-1-777";
  static auto arena = std::make_shared<shm_arena>(name, arena_bytes); // lives as long as the process
  return name;
}

shm_lending& lending() {
  static std::unique_ptr<shm_lending> l = [] {
    shm_lending::carrier c;
    c.send_control = [](int, std::vector<std::uint64_t>, bool) {};
    c.deliver = [](std::vector<std::uint64_t>, std::size_t, kernels::tensor data) {
      if (data.defined() && data.numel() > 0) { // read what the view shows: it must be mapped
        // A byte: a reference may point anywhere in the peer's arena, aligned or not.
        const volatile unsigned char last = reinterpret_cast<const unsigned char*>(data.data())[data.bytes() - 1];
        (void)last;
        ++views;
      }
    };
    c.reject = [](const std::string&) { ++refusals; };
    c.peer_dead = [](int peer) { return peer == 3; };
    auto p = std::make_unique<shm_lending>(0, 4, arena_bytes, 4096, std::size_t{1} << 20, token(), c);
    for (int r = 1; r < 4; ++r)
      p->set_local(r, true);
    p->open_arena();
    return p;
  }();
  return *l;
}

void record(std::vector<std::uint8_t>& out, const std::vector<std::uint64_t>& words, std::size_t bytes = 0,
            bool data = false) {
  if (bytes == 0)
    bytes = words.size() * 8;
  const auto tag = static_cast<std::uint16_t>(bytes | (data ? 0x8000u : 0u));
  out.push_back(static_cast<std::uint8_t>(tag));
  out.push_back(static_cast<std::uint8_t>(tag >> 8));
  const auto* p = reinterpret_cast<const std::uint8_t*>(words.data());
  out.insert(out.end(), p, p + bytes);
}

std::vector<std::uint64_t> announce(std::uint64_t src, std::uint64_t bytes, const std::string& name) {
  std::vector<std::uint64_t> w = {announce_marker, token(), src, bytes, name.size()};
  std::vector<std::uint64_t> text((name.size() + 7) / 8, 0);
  std::memcpy(text.data(), name.data(), name.size());
  w.insert(w.end(), text.begin(), text.end());
  return w;
}

} // namespace

namespace gwfuzz {
depth reached() {
  return {std::to_string(views) + " references read, " + std::to_string(refusals) + " frames refused",
          views > 0 && refusals > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() {
  const auto& name = peer_arena_name();
  std::vector<std::uint8_t> mapped_then_ref, deferred, releases;
  record(mapped_then_ref, announce(1, arena_bytes, name));
  record(mapped_then_ref, {mapped_marker, token(), 1});
  // A reference into rank 1's arena, in front of a (here empty) frame header of 2 words.
  record(mapped_then_ref, {ref_marker, token(), 1, 5, 1, 4096, 1024, 0x47574831, 0});
  record(mapped_then_ref, {ref_marker, token(), 2, 6, 0, 0, 4096, 0x47574831, 0}); // our own memory, come back
  record(deferred, {ref_marker, token(), 1, 7, 2, 0, 64, 0, 0}); // rank 2's, not announced yet
  record(deferred, announce(2, arena_bytes, "/gradwire-1-2-3"));
  record(releases, {release_marker, token(), 1, 5});
  record(releases, {release_marker, token(), 9, 5});
  return {mapped_then_ref, deferred, releases};
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& l = lending();
  std::size_t at = 0;
  while (at + 2 <= size) {
    const std::uint16_t tag = static_cast<std::uint16_t>(data[at] | (data[at + 1] << 8));
    at += 2;
    const std::size_t bytes = std::min<std::size_t>(tag & 0x7fffu, size - at);
    std::vector<std::uint64_t> hdr((bytes + 7) / 8, 0);
    if (bytes)
      std::memcpy(hdr.data(), data + at, bytes);
    at += bytes;
    if (hdr.empty())
      hdr.push_back(0); // the link hands on no frame shorter than a word; the protocol checks header_bytes
    (void)l.on_frame(hdr, bytes, (tag & 0x8000u) ? 4 : 0);
  }
  return 0;
}
