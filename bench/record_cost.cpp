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

/// Writes `n` units through `write` (which returns the file's bytes, or -1
/// with the error printed), times it, and prints the cost per unit.
template <class Write>
int timed(const std::string& path, long n, const char* what, const char* unit, Write write) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t bytes = write();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  if (bytes < 0)
    return 1;
  std::printf("%s: %ld %ss in %.3f s: %.1f ns per %s, %.2f bytes per %s\n", what, n, unit, s,
              s * 1e9 / static_cast<double>(n), unit, static_cast<double>(bytes) / static_cast<double>(n), unit);
  return 0;
}

/// The writer's bytes, or -1 with its error printed.
template <class Writer>
std::int64_t bytes_of(const Writer& rec) {
  if (rec.error().empty())
    return rec.bytes();
  std::fprintf(stderr, "%s\n", rec.error().c_str());
  return -1;
}

/// An async shard: a pull answered and a push applied per update, W workers in turn.
int shard_updates(const std::string& path, long n, int w) {
  return timed(path, n, "record", "update", [&] {
    gradwire::actors::record_writer rec(path, {0, 0, 1 << 20, w}, 0);
    for (long i = 0; i < n; ++i) {
      const int r = static_cast<int>(i % w);
      const std::int64_t step = i / w;
      rec.add({true, r, step, 0});
      rec.add({false, r, step, static_cast<std::int64_t>(i % 7)});
    }
    return bytes_of(rec);
  });
}

/// An AD-PSGD worker's store: its read, send and apply, and one neighbour's average, per step.
int mixer_steps(const std::string& path, long n, int w) {
  using k = gradwire::actors::mix_kind;
  return timed(path, n, "mixer record", "step", [&] {
    gradwire::actors::mix_record_writer rec(path, {0, w}, 0);
    for (long i = 0; i < n; ++i) {
      rec.add({k::read, 0, i});
      rec.add({k::mix, 1 + static_cast<int>(i % (w - 1)), i});
      rec.add({k::send, 0, i});
      rec.add({k::apply_mixed, 0, i});
    }
    rec.add({k::close, 0, n});
    return bytes_of(rec);
  });
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
  return shard_updates(path, n, w);
}
