// Fuzz target: a checkpoint part file as `gradwire run --resume` reads it
// (the magic, sizes and CRC-32 of the header, then the meta text that
// names every section), and the meta text alone, as a peer's snapshot
// message carries it (no CRC there). Anything it does not accept must be a
// gradwire::error naming the source, never a crash or a read past the data.
#include "actors/snapshot.hpp"
#include "fuzz_target.hpp"
#include "kernels/error.hpp"
#include "scheduler/app/checkpoint.hpp"

#include <string>
#include <vector>

using namespace gradwire;

namespace {
std::int64_t loaded = 0, refused = 0, metas = 0;

actors::snapshot sample() {
  actors::snapshot s;
  s.who = "worker 1";
  s.step = 20;
  s.put("params", std::vector<float>{1.f, 2.f, 3.f, 4.f});
  s.put("moments", std::vector<float>{0.5f, 0.25f, 0.f, -1.f});
  s.put("optimizer_steps", std::int64_t{20});
  s.put("clocks", std::vector<std::int64_t>{3, 4, 5});
  return s;
}
} // namespace

namespace gwfuzz {
depth reached() {
  return {std::to_string(loaded) + " loaded, " + std::to_string(refused) + " refused, " + std::to_string(metas) +
            " meta texts parsed",
          loaded > 0 && refused > 0 && metas > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() {
  const auto part = scheduler::part_bytes(sample());
  const auto meta = sample().meta();
  return {std::vector<std::uint8_t>(part.begin(), part.end()), std::vector<std::uint8_t>(meta.begin(), meta.end())};
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto s = scheduler::part_from_bytes(bytes, "fuzz.gwc");
    for (const auto& [name, v] : s.floats)
      (void)v.size();
    ++loaded;
  } catch (const error&) {
    ++refused;
  }
  static const std::vector<float> floats(64, 1.f);
  for (std::size_t n : {std::size_t{0}, std::size_t{8}, std::size_t{64}}) {
    try {
      (void)actors::snapshot::from_parts(bytes, floats.data(), n, "fuzz meta");
      ++metas;
    } catch (const error&) {
    }
  }
  return 0;
}
