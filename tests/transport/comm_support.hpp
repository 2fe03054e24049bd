#pragma once
// The collective communicator's test fixture: N communicators in one
// process, each driven by its own thread, and the check that an allreduce
// gives the exact sum on every rank, bit for bit the same, whichever rank
// arrives first (test_ucx_comm.cpp, test_shm_collective.cpp).
#include "transport/ucx_comm.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gradwire::comm_fixture {

using transport::allreduce_algo;
using transport::comm_net;
using transport::ucx_comm;

inline std::vector<std::string> on_every_rank(int n, const std::function<void(int)>& body);

/// n communicators in this process. host_of(r) says which emulated host
/// rank r is on (default: one host, unless the TLS is TCP only, when each
/// rank is a host of its own).
inline std::vector<std::unique_ptr<ucx_comm>> make_comms(int n, const std::string& tls, int timeout_ms = 20000,
                                                  comm_net net = comm_net::automatic,
                                                  std::function<int(int)> host_of = nullptr) {
  if (!host_of)
    host_of = [&](int r) { return tls.find("tcp") == std::string::npos ? 0 : r; };
  std::vector<std::unique_ptr<ucx_comm>> comms;
  std::vector<std::vector<std::uint8_t>> addrs;
  for (int r = 0; r < n; ++r) {
    transport::comm_options o;
    o.tls = tls;
    o.timeout_ms = timeout_ms;
    o.spin_yield = true; // n threads on 2 CPUs
    o.net = net;
    o.token_hash = 0x1234;
    comms.push_back(std::make_unique<ucx_comm>(r, n, o));
    addrs.push_back(comms.back()->worker_address());
  }
  // Every rank connects at once, as in a job (lanes dial and accept each other).
  const auto errors = on_every_rank(n, [&](int r) {
    std::vector<int> hosts(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q)
      hosts[static_cast<std::size_t>(q)] = host_of(q);
    comms[static_cast<std::size_t>(r)]->connect(addrs, hosts);
  });
  for (const auto& e : errors)
    REQUIRE(e == "");
  return comms;
}

/// Runs body(rank) on one thread per rank; returns each rank's error ("" if none).
inline std::vector<std::string> on_every_rank(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts)
    t.join();
  return errors;
}

/// Inputs that round: rank r's element i is a float of varied magnitude,
/// so the order of the adds shows in the bits.
inline float input(int r, std::size_t i) {
  std::uint64_t h = (static_cast<std::uint64_t>(r) << 40) ^ (i * 0x9e3779b97f4a7c15ull);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  const float u = static_cast<float>(h & 0xffffff) / static_cast<float>(0x800000) - 1.f; // [-1, 1)
  return u * static_cast<float>(1 << (i % 9));
}

inline void check_sums(int n, const std::string& tls, allreduce_algo algo, const std::vector<std::size_t>& counts,
                comm_net net = comm_net::automatic, std::function<int(int)> host_of = nullptr) {
  auto comms = make_comms(n, tls, 20000, net, std::move(host_of));
  for (std::size_t count : counts) {
    std::vector<std::vector<float>> bufs(static_cast<std::size_t>(n), std::vector<float>(count));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        bufs[static_cast<std::size_t>(r)][i] = input(r, i);
    // Ranks arrive in a different order at each size.
    std::mt19937 g(static_cast<unsigned>(count));
    std::vector<int> delay_us(static_cast<std::size_t>(n));
    for (auto& d : delay_us)
      d = static_cast<int>(g() % 3000);
    const auto errors = on_every_rank(n, [&](int r) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us[static_cast<std::size_t>(r)]));
      comms[static_cast<std::size_t>(r)]->allreduce(bufs[static_cast<std::size_t>(r)].data(), count, algo);
    });
    std::string all;
    for (int r = 0; r < n; ++r)
      all += errors[static_cast<std::size_t>(r)];
    INFO("count " << count);
    REQUIRE(all == "");
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0;
      for (int r = 0; r < n; ++r)
        exact += input(r, i);
      // Float sums of n terms: within n ulps of the magnitude.
      off += std::abs(bufs[0][i] - exact) > 1e-6 * n * (1 << (i % 9));
    }
    REQUIRE(off == 0);
    for (int r = 1; r < n; ++r) // bit for bit the same on every rank
      REQUIRE(std::memcmp(bufs[0].data(), bufs[static_cast<std::size_t>(r)].data(), count * sizeof(float)) == 0);
  }
}

inline const std::vector<std::size_t> counts = {1, 3, 4, 5, 255, 256, 4097, 16384, 65537, 262144};

} // namespace gradwire::comm_fixture
