// A seeded mutation loop for one fuzz target, for builds without
// libFuzzer (gcc, under ASan/UBSan in CI):
//   fuzz_X ITERATIONS [SEED] [CORPUS_DIR...]
// Starts from the target's own seeds and every file in the corpus
// folders (regression inputs, examples), mutates them (bit flips,
// interesting integers at any offset, inserted, deleted and duplicated
// ranges, splices of two inputs) and feeds each result to the target.
// The run is deterministic: the same arguments replay the same inputs.
//   fuzz_X --write-seeds DIR   writes the target's seeds as files (the
//   starting corpus of a libFuzzer run of fuzz_X_libfuzzer).
// A crash is the sanitizer's report, and the input that caused it is
// written to fuzz-crash-input.bin (under a sanitizer); exit status 0
// otherwise.
#include "fuzz_target.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace {

std::vector<std::uint8_t> current; // the input being run, for the crash handler

extern "C" void write_crash_input() {
  if (FILE* f = std::fopen("fuzz-crash-input.bin", "wb")) {
    std::fwrite(current.data(), 1, current.size(), f);
    std::fclose(f);
  }
}

class mutator {
public:
  explicit mutator(std::uint64_t seed) : rng_(seed) {}
  std::size_t below(std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

  void mutate(std::vector<std::uint8_t>& x, const std::vector<std::vector<std::uint8_t>>& pool) {
    const int rounds = 1 + static_cast<int>(below(8));
    for (int i = 0; i < rounds; ++i)
      one(x, pool);
    if (x.size() > max_len)
      x.resize(max_len);
  }

private:
  static constexpr std::size_t max_len = 1 << 16;
  std::mt19937_64 rng_;

  void one(std::vector<std::uint8_t>& x, const std::vector<std::vector<std::uint8_t>>& pool) {
    static const std::uint64_t interesting[] = {0, 1, 2, 3, 4, 7, 8, 16, 40, 56, 63, 64, 127, 128, 255, 256, 4096,
                                                65535, 65536, 0x7fffffff, 0x80000000, 0xffffffff, 1ull << 31,
                                                1ull << 32, 1ull << 40, 0x7fffffffffffffffull, ~0ull, ~0ull - 1};
    switch (below(x.empty() ? 1 : 7)) {
    case 0: { // insert random bytes
      const auto at = below(x.size() + 1), n = 1 + below(16);
      std::vector<std::uint8_t> r(n);
      for (auto& b : r)
        b = static_cast<std::uint8_t>(below(256));
      x.insert(x.begin() + static_cast<std::ptrdiff_t>(at), r.begin(), r.end());
      break;
    }
    case 1: // flip a bit
      x[below(x.size())] ^= static_cast<std::uint8_t>(1u << below(8));
      break;
    case 2: // set a byte
      x[below(x.size())] = static_cast<std::uint8_t>(below(256));
      break;
    case 3: { // an interesting integer, 1-8 bytes wide, at any offset
      const auto v = interesting[below(std::size(interesting))];
      const std::size_t w = std::size_t{1} << below(4), at = below(x.size());
      for (std::size_t k = 0; k < w && at + k < x.size(); ++k)
        x[at + k] = static_cast<std::uint8_t>(v >> (8 * k));
      break;
    }
    case 4: { // delete a range
      const auto at = below(x.size()), n = 1 + below(std::min<std::size_t>(x.size() - at, 64));
      x.erase(x.begin() + static_cast<std::ptrdiff_t>(at), x.begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
    case 5: { // duplicate a range
      const auto at = below(x.size()), n = 1 + below(std::min<std::size_t>(x.size() - at, 64));
      std::vector<std::uint8_t> r(x.begin() + static_cast<std::ptrdiff_t>(at),
                                  x.begin() + static_cast<std::ptrdiff_t>(at + n));
      x.insert(x.begin() + static_cast<std::ptrdiff_t>(below(x.size() + 1)), r.begin(), r.end());
      break;
    }
    default: { // splice: this input's head, another's tail
      const auto& o = pool[below(pool.size())];
      if (o.empty())
        break;
      const auto cut = below(x.size() + 1), from = below(o.size());
      x.resize(cut);
      x.insert(x.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
      break;
    }
    }
  }
};

} // namespace

/// Writes the target's own seeds into `dir` as files, the starting corpus
/// of a coverage-guided libFuzzer run (scripts/sanitize.sh libfuzzer).
int write_seeds(const char* dir) {
  std::filesystem::create_directories(dir);
  const auto seeds = gwfuzz::seeds();
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const auto path = std::filesystem::path(dir) / ("seed-" + std::to_string(i));
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
    if (!out) {
      std::fprintf(stderr, "could not write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("%zu seeds written to %s\n", seeds.size(), dir);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ITERATIONS [SEED] [CORPUS_DIR...]\n       %s --write-seeds DIR\n", argv[0],
                 argv[0]);
    return 2;
  }
  if (std::strcmp(argv[1], "--write-seeds") == 0) {
    if (argc != 3) {
      std::fprintf(stderr, "usage: %s --write-seeds DIR\n", argv[0]);
      return 2;
    }
    return write_seeds(argv[2]);
  }
  const long long iterations = std::atoll(argv[1]);
  const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  auto pool = gwfuzz::seeds();
  const std::size_t own = pool.size();
  for (int i = 3; i < argc; ++i)
    if (std::filesystem::is_directory(argv[i])) // a corpus folder may be empty, and git keeps no empty folder
      for (const auto& e : std::filesystem::directory_iterator(argv[i]))
      if (e.is_regular_file()) {
        std::ifstream in(e.path(), std::ios::binary);
        pool.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
  if (pool.empty())
    pool.emplace_back();
  if (__sanitizer_set_death_callback) // a sanitizer's report: keep the input that caused it
    __sanitizer_set_death_callback(write_crash_input);
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& x : pool) { // every seed as it is first
    current = x;
    LLVMFuzzerTestOneInput(current.data(), current.size());
  }
  mutator m(seed);
  for (long long i = 0; i < iterations; ++i) {
    current = pool[m.below(pool.size())];
    m.mutate(current, pool);
    LLVMFuzzerTestOneInput(current.data(), current.size());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto d = gwfuzz::reached();
  std::printf("%s: %lld mutated inputs from %zu seeds (%zu built in, %zu from files), seed %llu, %.1f s "
              "(%.0f inputs/s), no crash; %s\n",
              argv[0], iterations, pool.size(), own, pool.size() - own, static_cast<unsigned long long>(seed), s,
              static_cast<double>(iterations) / s, d.text.c_str());
  std::remove("fuzz-crash-input.bin");
  if (!d.deep) {
    std::printf("%s: no input got past the first checks: this run tested nothing\n", argv[0]);
    return 1;
  }
  return 0;
}
