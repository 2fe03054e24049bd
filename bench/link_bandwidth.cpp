// gradwire-bench-link: raw bandwidth of transport/'s UCX link between two
// local processes (no actors): rank 0 streams frames of SIZE bytes, WINDOW
// in flight, rank 1 acknowledges every window. Compare with
// `ucx_perftest -t ucp_am_bw` (the same UCX, its own loop).
#include "transport/rendezvous.hpp"
#include "transport/ucx_link.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace gradwire;

int run(int rank, std::size_t bytes, int count, int window, const std::string& tls, int port) {
  transport::ucx_options uo;
  uo.tls = tls;
  transport::ucx_link link(rank, 2, uo);
  transport::rendezvous_options ro;
  ro.port = port;
  auto table = transport::rendezvous(rank, 2, ro, link.address());
  link.connect(table);
  std::atomic<int> got{0};
  transport::link::handlers h;
  h.receive = [&](const void*, std::size_t, kernels::tensor) { got.fetch_add(1); };
  link.start(h);
  auto data = kernels::tensor::zeros({static_cast<std::int64_t>(bytes / 4)});
  std::vector<std::uint64_t> header(4, 0);
  auto t0 = std::chrono::steady_clock::now();
  if (rank == 0) {
    for (int i = 0; i < count; i += window) {
      for (int k = 0; k < window; ++k)
        link.send(1, header, data);
      while (got.load() < i / window + 1)
        std::this_thread::yield();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%zu bytes x %d (window %d): %.3f GB/s, %.1f us per frame\n", bytes, count, window,
                static_cast<double>(bytes) * count / s / 1e9, s / count * 1e6);
  } else {
    int acked = 0;
    while (acked < count / window) {
      if (got.load() >= (acked + 1) * window) {
        link.send(0, header, {});
        ++acked;
      } else
        std::this_thread::yield();
    }
  }
  link.close(2000);
  return 0;
}

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1u << 20);
  const int count = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int window = argc > 3 ? std::atoi(argv[3]) : 4;
  const std::string tls = argc > 4 ? argv[4] : "";
  const int port = 20000 + getpid() % 20000;
  const pid_t pid = fork();
  if (pid == 0)
    return run(1, bytes, count, window, tls, port);
  run(0, bytes, count, window, tls, port);
  int st = 0;
  waitpid(pid, &st, 0);
  return 0;
}
