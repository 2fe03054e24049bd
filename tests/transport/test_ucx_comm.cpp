// The collective communicator (transport/ucx_comm.hpp): N ranks, each its
// own UCX worker driven by its own thread, over shared memory, UCX's TCP
// and the communicator's own TCP lanes, and mixes of them by host.
// Every algorithm at sizes around its edges gives the exact sum on every
// rank, bit for bit the same, whichever rank arrives first; a peer that
// falls silent or sends the wrong size is named, and nothing hangs.
#include "kernels/error.hpp"
#include "transport/ucx_comm.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace gradwire;
using transport::allreduce_algo;
using transport::comm_net;
using transport::ucx_comm;

namespace {

std::vector<std::string> on_every_rank(int n, const std::function<void(int)>& body);

/// n communicators in this process. host_of(r) says which emulated host
/// rank r is on (default: one host, unless the TLS is TCP only, when each
/// rank is a host of its own).
std::vector<std::unique_ptr<ucx_comm>> make_comms(int n, const std::string& tls, int timeout_ms = 20000,
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
    std::vector<bool> same(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q)
      same[static_cast<std::size_t>(q)] = host_of(q) == host_of(r);
    comms[static_cast<std::size_t>(r)]->connect(addrs, same);
  });
  for (const auto& e : errors)
    REQUIRE(e == "");
  return comms;
}

/// Runs body(rank) on one thread per rank; returns each rank's error ("" if none).
std::vector<std::string> on_every_rank(int n, const std::function<void(int)>& body) {
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
float input(int r, std::size_t i) {
  std::uint64_t h = (static_cast<std::uint64_t>(r) << 40) ^ (i * 0x9e3779b97f4a7c15ull);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  const float u = static_cast<float>(h & 0xffffff) / static_cast<float>(0x800000) - 1.f; // [-1, 1)
  return u * static_cast<float>(1 << (i % 9));
}

void check_sums(int n, const std::string& tls, allreduce_algo algo, const std::vector<std::size_t>& counts,
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

const std::vector<std::size_t> counts = {1, 3, 4, 5, 255, 256, 4097, 16384, 65537, 262144};

} // namespace

TEST_CASE("ucx comm: recursive doubling sums exactly on 2 to 6 ranks over shared memory") {
  for (int n : {2, 3, 4, 5, 6}) {
    INFO("ranks " << n);
    check_sums(n, "posix,cma,self", allreduce_algo::recursive_doubling, counts);
  }
}

TEST_CASE("ucx comm: the ring sums exactly on 2 to 5 ranks over shared memory") {
  for (int n : {2, 3, 4, 5}) {
    INFO("ranks " << n);
    check_sums(n, "posix,cma,self", allreduce_algo::ring, counts);
  }
}

TEST_CASE("ucx comm: Rabenseifner's halving and doubling sums exactly on 2 to 8 ranks over shared memory") {
  for (int n : {2, 3, 4, 5, 6, 7, 8}) { // powers of two, and ranks folded into a partner first
    INFO("ranks " << n);
    check_sums(n, "posix,cma,self", allreduce_algo::halving_doubling, counts);
  }
}

TEST_CASE("ucx comm: auto over UCX's TCP on 3 ranks") {
  auto comms = make_comms(3, "tcp,self", 20000, comm_net::ucx);
  for (int r = 0; r < 3; ++r)
    for (int q = 0; q < 3; ++q)
      CHECK(!comms[static_cast<std::size_t>(r)]->by_lane(q));
  comms.clear();
  check_sums(3, "tcp,self", allreduce_algo::automatic, counts, comm_net::ucx);
}

TEST_CASE("ucx comm: every algorithm sums exactly on 2 to 5 ranks over TCP lanes") {
  auto comms = make_comms(3, "tcp,self");
  CHECK(comms[0]->by_lane(1));
  CHECK(comms[2]->by_lane(0));
  comms.clear();
  for (int n : {2, 3, 4, 5}) {
    INFO("ranks " << n);
    check_sums(n, "tcp,self", allreduce_algo::recursive_doubling, counts);
    check_sums(n, "tcp,self", allreduce_algo::ring, counts);
    check_sums(n, "tcp,self", allreduce_algo::halving_doubling, counts);
  }
}

TEST_CASE("ucx comm: two hosts of two ranks mix shared memory and lanes pair by pair") {
  const auto host_of = [](int r) { return r / 2; };
  auto comms = make_comms(4, "posix,sysv,tcp,self", 20000, comm_net::automatic, host_of);
  CHECK(!comms[0]->by_lane(1));
  CHECK(comms[0]->by_lane(2));
  CHECK(comms[3]->by_lane(1));
  CHECK(!comms[3]->by_lane(2));
  CHECK(comms[0]->describe().find("TCP lanes to 2 of 3 peers") != std::string::npos);
  comms.clear();
  check_sums(4, "posix,sysv,tcp,self", allreduce_algo::ring, counts, comm_net::automatic, host_of);
  check_sums(3, "posix,sysv,tcp,self", allreduce_algo::recursive_doubling, counts, comm_net::automatic, host_of);
  check_sums(4, "posix,sysv,tcp,self", allreduce_algo::halving_doubling, counts, comm_net::automatic, host_of);
}

TEST_CASE("ucx comm: a rank that calls with another size is named") {
  auto net = GENERATE(comm_net::ucx, comm_net::sockets);
  INFO("net " << transport::to_string(net));
  auto comms = make_comms(2, "posix,cma,self", 20000, net);
  std::vector<float> a(100, 1.f), b(90, 1.f);
  const auto errors = on_every_rank(2, [&](int r) {
    if (r == 0)
      comms[0]->allreduce(a.data(), a.size(), allreduce_algo::recursive_doubling);
    else
      comms[1]->allreduce(b.data(), b.size(), allreduce_algo::recursive_doubling);
  });
  // Rank 1 gets 400 bytes where it expects 360; rank 0 gets 360 for 400.
  INFO(errors[0] << " / " << errors[1]);
  CHECK(errors[1].find("rank 0 sent more than the 360 bytes expected") != std::string::npos);
  CHECK(errors[0].find("rank 1 sent 360 bytes at step 1, 400 expected") != std::string::npos);
  std::vector<float> c(4, 1.f);
  CHECK_THROWS_WITH(comms[0]->allreduce(c.data(), c.size()), Catch::Contains("failed earlier"));
}

TEST_CASE("ucx comm: a silent rank is named within the timeout and nothing hangs") {
  auto net = GENERATE(comm_net::ucx, comm_net::sockets);
  INFO("net " << transport::to_string(net));
  auto comms = make_comms(3, "posix,cma,self", 300, net);
  std::vector<float> a(1000, 1.f), b(1000, 1.f);
  // Rank 2 never calls. Rank 0 folds into rank 1, which waits for rank 2
  // and names it; rank 0, waiting for rank 1's result, names rank 1:
  // after its own timeout, or on lanes as soon as rank 1's failure shuts
  // them (whichever comes first: both waits began together).
  const auto errors = on_every_rank(2, [&](int r) {
    comms[static_cast<std::size_t>(r)]->allreduce(r == 0 ? a.data() : b.data(), 1000, allreduce_algo::recursive_doubling);
  });
  INFO(errors[0] << " / " << errors[1]);
  CHECK(errors[1].find("no word from rank 2 for 300 ms") != std::string::npos);
  CHECK((errors[0].find("no word from rank 1 for 300 ms") != std::string::npos ||
         (net == comm_net::sockets && errors[0].find("rank 1 closed its connection") != std::string::npos)));
}

TEST_CASE("ucx comm: algorithm names") {
  CHECK(transport::parse_allreduce_algo("rd", "x") == allreduce_algo::recursive_doubling);
  CHECK(transport::parse_allreduce_algo("ring", "x") == allreduce_algo::ring);
  CHECK(transport::parse_allreduce_algo("auto", "x") == allreduce_algo::automatic);
  CHECK(transport::parse_allreduce_algo("rabenseifner", "x") == allreduce_algo::halving_doubling);
  CHECK_THROWS_WITH(transport::parse_allreduce_algo("tree", "--comm-algo"), Catch::Contains("--comm-algo 'tree'"));
  CHECK(transport::parse_comm_net("sockets", "x") == comm_net::sockets);
  CHECK_THROWS_WITH(transport::parse_comm_net("ib", "--net"), Catch::Contains("--net 'ib': expected auto, ucx or sockets"));
}

TEST_CASE("ucx comm: a peer without lanes is refused before anything connects") {
  std::vector<std::unique_ptr<ucx_comm>> comms;
  std::vector<std::vector<std::uint8_t>> addrs;
  for (auto net : {comm_net::sockets, comm_net::ucx}) {
    transport::comm_options o;
    o.net = net;
    o.timeout_ms = 500;
    comms.push_back(std::make_unique<ucx_comm>(static_cast<int>(comms.size()), 2, o));
    addrs.push_back(comms.back()->worker_address());
  }
  CHECK_THROWS_WITH(comms[0]->connect(addrs, {true, true}), Catch::Contains("rank 1 opened no TCP lanes"));
  auto bad = addrs;
  bad[1].resize(bad[1].size() - 3);
  CHECK_THROWS_WITH(comms[0]->connect(bad, {true, true}), Catch::Contains("rank 1's address is truncated"));
}
