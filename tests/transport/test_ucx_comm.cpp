// The collective communicator (transport/ucx_comm.hpp): N ranks, each its
// own UCX worker driven by its own thread, over shared memory, UCX's TCP
// and the communicator's own TCP lanes, and mixes of them by host.
// Every algorithm at sizes around its edges gives the exact sum on every
// rank, bit for bit the same, whichever rank arrives first; a peer that
// falls silent or sends the wrong size is named, and nothing hangs.
#include "kernels/error.hpp"
#include "comm_support.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

using namespace gradwire;
using namespace gradwire::comm_fixture;

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
  CHECK(comms[0]->describe().find("hierarchical") != std::string::npos); // the flat algorithms below, forced
  CHECK(comms[0]->describe().find("(TCP lanes to 2 of 3 peers; recursive doubling below") != std::string::npos);
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

TEST_CASE("ucx comm: abort gives up a sum in progress at once, from another thread, and every later one") {
  // Rank 1 never calls: without abort, rank 0 would wait out the
  // communicator's timeout (ctest's limit would catch that hang). Abort comes while rank
  // 0's call is in progress or before it begins: either way the call fails,
  // with the reason given, and so does the next.
  auto algo = GENERATE(allreduce_algo::recursive_doubling, allreduce_algo::shared_memory);
  auto net = GENERATE(comm_net::ucx, comm_net::sockets);
  INFO("algorithm " << transport::to_string(algo) << ", net " << transport::to_string(net));
  if (algo == allreduce_algo::shared_memory && net == comm_net::sockets)
    return; // TCP within the host as asked: no shared memory to sum through, so no sum to give up
  auto comms = make_comms(2, "posix,cma,self", 60000, net);
  std::vector<float> a(100000, 1.f);
  std::string failed;
  std::thread rank0([&] {
    try {
      comms[0]->allreduce(a.data(), a.size(), algo);
    } catch (const error& e) {
      failed = e.what();
    }
  });
  comms[0]->abort("rank 1 is lost: its process exited");
  rank0.join();
  INFO(failed);
  CHECK((failed.find("rank 1 is lost: its process exited") != std::string::npos ||
         failed.find("given up") != std::string::npos));
  CHECK_THROWS_WITH(comms[0]->allreduce(a.data(), a.size(), algo), Catch::Contains("was given up"));
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
  CHECK_THROWS_WITH(comms[0]->connect(addrs, {0, 0}), Catch::Contains("rank 1 opened no TCP lanes"));
  auto bad = addrs;
  bad[1].resize(bad[1].size() - 3);
  CHECK_THROWS_WITH(comms[0]->connect(bad, {0, 0}), Catch::Contains("rank 1's address is truncated"));
}
