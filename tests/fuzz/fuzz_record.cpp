// Fuzz target: an async shard's record as `gradwire replay` reads it (the
// magic, the header's length and text, then varint entries), and the cut a
// replay would follow of it; and an AD-PSGD worker's mixer record, with
// the gate a replay would open on it. Anything it does not accept must be a
// gradwire::error naming the file, never a crash, a hang or a read past
// the data.
#include "actors/gossip_mixer.hpp"
#include "actors/update_record.hpp"
#include "fuzz_target.hpp"
#include "kernels/error.hpp"
#include "../temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace gradwire;

namespace {
std::int64_t loaded = 0, refused = 0, cut = 0, gated = 0;

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<std::uint8_t> mixer_seed(const std::string& dir) {
  const auto path = dir + "/mixer-1.gwr";
  {
    actors::mix_record_writer w(path, {1, 3}, 0);
    using k = actors::mix_kind;
    for (int s = 0; s < 6; ++s)
      for (const auto& e : {actors::mix_event{k::read, 1, s}, actors::mix_event{k::mix, s % 2 == 0 ? 0 : 2, s},
                            actors::mix_event{k::send, 1, s}, actors::mix_event{s % 3 ? k::apply_mixed : k::apply_alone, 1, s}})
        w.add(e);
    w.add({k::close, 1, 6});
  }
  const auto bytes = file_bytes(path);
  return {bytes.begin(), bytes.end()};
}
} // namespace

namespace gwfuzz {
depth reached() {
  return {std::to_string(loaded) + " read, " + std::to_string(refused) + " refused, " + std::to_string(cut) +
            " cut for a replay, " + std::to_string(gated) + " mixer records gated",
          loaded > 0 && refused > 0 && cut > 0 && gated > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() {
  const auto dir = gwtest::fresh_dir("fuzz-record-seed", true);
  const auto path = dir + "/shard-0.gwr";
  {
    actors::record_writer w(path, {0, 0, 64, 3}, 0);
    for (int k = 0; k < 6; ++k)
      for (int r = 0; r < 3; ++r) {
        w.add({true, r, k, 0});
        w.add({false, r, k, (k + r) % 4});
      }
  }
  const auto bytes = file_bytes(path);
  auto mixer = mixer_seed(dir);
  std::filesystem::remove_all(dir);
  return {std::vector<std::uint8_t>(bytes.begin(), bytes.end()), std::move(mixer)};
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (bytes.rfind("GWMIX001", 0) == 0) {
      auto m = std::make_shared<actors::mix_record>(actors::mix_record_from_bytes(bytes, "fuzz.gwr"));
      ++loaded;
      (void)actors::open_mix_gate(std::move(m));
      ++gated;
      return 0;
    }
    auto r = actors::record_from_bytes(bytes, "fuzz.gwr");
    ++loaded;
    r.header.shard = 0;
    const int workers = r.header.workers;
    (void)actors::consistent_cut({std::move(r)}, workers);
    ++cut;
  } catch (const error&) {
    ++refused;
  }
  return 0;
}
