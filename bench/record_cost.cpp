// What a shard pays to record an update (actors/update_record.hpp): one
// pull answered and one push applied, the apply written to the file at
// once, as a shard of an async parameter server records them. Prints the
// nanoseconds per update over N updates of W workers, written into DIR.
// With `mixer`, what an AD-PSGD worker's store pays per step
// (actors/mix_record.hpp): its read, send and apply and one neighbour's
// average, the apply written at once.
//
//   gradwire-bench-record [DIR] [N] [W] [mixer]
#include "actors/mix_record.hpp"
#include "actors/update_record.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace {

int mixer_steps(const std::string& path, long n, int w) {
  using k = gradwire::actors::mix_kind;
  std::int64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    gradwire::actors::mix_record_writer rec(path, {0, w}, 0);
    for (long i = 0; i < n; ++i) {
      rec.add({k::read, 0, i});
      rec.add({k::mix, 1 + static_cast<int>(i % (w - 1)), i}); // a neighbour's average
      rec.add({k::send, 0, i});
      rec.add({k::apply_mixed, 0, i});
    }
    rec.add({k::close, 0, n});
    bytes = rec.bytes();
    if (!rec.error().empty()) {
      std::fprintf(stderr, "%s\n", rec.error().c_str());
      return 1;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  std::printf("mixer record: %ld steps of a worker of %d in %.3f s: %.1f ns per step, %.2f bytes per step\n", n, w, s,
              s * 1e9 / static_cast<double>(n), static_cast<double>(bytes) / static_cast<double>(n));
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::filesystem::temp_directory_path().string();
  const long n = argc > 2 ? std::atol(argv[2]) : 200000;
  const int w = argc > 3 ? std::atoi(argv[3]) : 4;
  if (n <= 0 || w <= 0) {
    std::fputs("usage: gradwire-bench-record [DIR] [N > 0] [W > 0] [mixer]\n", stderr);
    return 2;
  }
  const auto path = dir + "/bench-record-" + std::to_string(::getpid()) + ".gwr";
  if (argc > 4 && std::string(argv[4]) == "mixer")
    return w >= 2 ? mixer_steps(path, n, w) : 2;
  std::int64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    gradwire::actors::record_writer rec(path, {0, 0, 1 << 20, w}, 0);
    for (long i = 0; i < n; ++i) {
      const int r = static_cast<int>(i % w);
      const std::int64_t step = i / w;
      rec.add({true, r, step, 0});
      rec.add({false, r, step, static_cast<std::int64_t>(i % 7)});
    }
    bytes = rec.bytes();
    if (!rec.error().empty()) {
      std::fprintf(stderr, "%s\n", rec.error().c_str());
      return 1;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  std::printf("record: %ld updates of %d workers in %.3f s: %.1f ns per update, %.2f bytes per update\n", n, w, s,
              s * 1e9 / static_cast<double>(n), static_cast<double>(bytes) / static_cast<double>(n));
  return 0;
}
