#pragma once
// What every fuzz target defines: libFuzzer's entry point, and the seeds
// built from real traffic (encoded by the same code a rank uses), so that
// mutations start from well-formed inputs and reach past the first check.
// mutate_main.cpp drives a target with a seeded mutation loop (any
// compiler, under ASan/UBSan in CI); with clang's -fsanitize=fuzzer the
// same file is a libFuzzer target (scripts/sanitize.sh fuzz).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace gwfuzz {
/// Well-formed inputs of this target.
std::vector<std::vector<std::uint8_t>> seeds();
/// How deep the run went ("412345 decoded, 587655 refused"), and whether
/// inputs got past the first checks at all: a run where none did tested
/// nothing, and fails.
struct depth {
  std::string text;
  bool deep = false;
};
depth reached();
/// Little helpers for building seeds.
inline void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
inline void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
} // namespace gwfuzz
