// The hierarchical allreduce (ucx_comm with hosts of several ranks each):
// shared-memory sums within a host, lanes across hosts by local index.
// Emulated hosts in one process (host_of): the ranks of one "host" sum
// through shared memory, those of different hosts only over TCP lanes.
// The exact sum, the same bits on every rank whatever the arrival order,
// across pieces and halves, on hosts of equal and of unequal rank counts
// (a rank alone on its host among them); auto picks it on several hosts
// when some hold 2 or more ranks; a silent rank is named and nothing hangs.
#include "comm_support.hpp"
#include "kernels/error.hpp"
#include "transport/comm_hosts.hpp"
#include "transport/shm_collective.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace gradwire;
using namespace gradwire::comm_fixture;
using transport::comm_detail::layout_of;
using transport::shm_allreduce;

namespace {
const std::string tls = "posix,sysv,tcp,self";

/// Every rank sums `count` floats `rounds` times from the same inputs,
/// arriving in another order each time; every rank of every round must
/// hold the first round's bits.
void same_bits_every_round(std::vector<std::unique_ptr<ucx_comm>>& comms, std::size_t count, int rounds) {
  const auto n = comms.size();
  std::vector<float> first;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        bufs[r][i] = input(static_cast<int>(r), i);
    const auto errors = on_every_rank(static_cast<int>(n), [&](int r) {
      const auto i = static_cast<std::size_t>(r);
      std::this_thread::sleep_for(std::chrono::microseconds((i * 977 + static_cast<std::size_t>(round) * 1531) % 2500));
      comms[i]->allreduce(bufs[i].data(), count, allreduce_algo::hierarchical);
    });
    for (const auto& e : errors)
      REQUIRE(e == "");
    if (round == 0)
      first = bufs[0];
    for (std::size_t r = 0; r < n; ++r)
      REQUIRE(std::memcmp(first.data(), bufs[r].data(), count * sizeof(float)) == 0);
  }
}
} // namespace

TEST_CASE("comm hosts: layouts by host in the order of each host's lowest rank") {
  auto l = layout_of({7, 7, 3, 3, 7, 3}, 4); // hosts {0, 1, 4} and {2, 3, 5}
  CHECK(l.hosts == 2);
  CHECK(l.uniform);
  CHECK(l.local == std::vector<int>{0, 1, 4});
  CHECK(l.local_index == 2);
  CHECK(l.host_index == 0);
  CHECK(l.across == std::vector<int>{4, 5});
  l = layout_of({7, 7, 3, 3, 7, 3}, 3);
  CHECK(l.host_index == 1);
  CHECK(l.across == std::vector<int>{1, 3});
  CHECK(l.owners == 3);
  CHECK(l.largest == 3);
  l = layout_of({0, 0, 1}, 2); // unequal hosts: one segment, carried by local index 0
  CHECK(!l.uniform);
  CHECK(l.owners == 1);
  CHECK(l.largest == 2);
  CHECK(l.across == std::vector<int>{0, 2});
  CHECK(l.local == std::vector<int>{2});
  l = layout_of({0, 0, 1}, 1); // past the smallest host's count: no group across
  CHECK(l.local_index == 1);
  CHECK(l.across.empty());
  l = layout_of({4, 9, 4, 9, 4, 4}, 5); // 4 ranks and 2: local index 3 carries nothing across
  CHECK(l.owners == 2);
  CHECK(l.local == std::vector<int>{0, 2, 4, 5});
  CHECK(l.across.empty());
  l = layout_of({4, 9, 4, 9, 4, 4}, 3);
  CHECK(l.across == std::vector<int>{2, 3});
  l = layout_of({5, 5, 5}, 1);
  CHECK(l.hosts == 1);
  CHECK(l.across == std::vector<int>{1});
  CHECK_THROWS_WITH(layout_of({0, 1}, 2), Catch::Contains("rank 2 of 2"));
}

TEST_CASE("hierarchical comm: exact sums and the same bits on every rank on 2 and 3 hosts of 2 and 3 ranks") {
  const std::size_t half = shm_allreduce::half_floats;
  auto sizes = counts; // 1 float to 1 MiB; then several pieces with unequal segments
  sizes.push_back(2 * half + 5);
  for (int hosts : {2, 3})
    for (int per : {2, 3}) {
      if (hosts * per > 6)
        continue;
      INFO(hosts << " hosts of " << per << " ranks, hosts interleaved");
      const int h = hosts;
      check_sums(hosts * per, tls, allreduce_algo::hierarchical, sizes, comm_net::automatic, [h](int r) { return r % h; });
    }
}

TEST_CASE("hierarchical comm: exact sums and the same bits on every rank on hosts of unequal rank counts") {
  const std::size_t half = shm_allreduce::half_floats;
  auto sizes = counts;
  sizes.push_back(2 * half + 5); // several pieces: the lone rank's slices must match its partners'
  sizes.push_back(3 * half + 7);
  struct shape {
    int ranks;
    std::function<int(int)> host_of;
    const char* what;
  };
  const std::vector<shape> shapes = {
    {3, [](int r) { return r == 1 ? 1 : 0; }, "2 ranks and 1, interleaved"},
    {4, [](int r) { return r < 3 ? 0 : 1; }, "3 ranks and 1"},
    {5, [](int r) { return r % 2; }, "3 ranks and 2, interleaved"},
    {6, [](int r) { return r == 0 ? 0 : (r < 3 ? 1 : 2); }, "1 rank, 2 and 3"},
  };
  for (const auto& sh : shapes) {
    INFO(sh.what);
    check_sums(sh.ranks, tls, allreduce_algo::hierarchical, sizes, comm_net::automatic, sh.host_of);
  }
}

TEST_CASE("hierarchical comm: the bits do not depend on which rank arrives first") {
  auto comms = make_comms(4, tls, 20000, comm_net::automatic, [](int r) { return r / 2; });
  for (std::size_t count : {std::size_t{1000}, std::size_t{300001}})
    same_bits_every_round(comms, count, 3);
  auto uneven = make_comms(5, tls, 20000, comm_net::automatic, [](int r) { return r < 3 ? 0 : 1; });
  for (std::size_t count : {std::size_t{1000}, std::size_t{300001}})
    same_bits_every_round(uneven, count, 3);
}

TEST_CASE("hierarchical comm: auto takes it on several hosts when some hold 2 or more ranks") {
  for (auto host_of : std::vector<std::function<int(int)>>{[](int r) { return r / 2; }, [](int r) { return r < 3 ? 0 : 1; }}) {
    auto comms = make_comms(4, tls, 20000, comm_net::automatic, host_of);
    for (const auto& c : comms) {
      CHECK(c->hierarchical());
      CHECK(!c->by_shared_memory());
      CHECK(c->choose(1) == allreduce_algo::hierarchical);
      CHECK(c->choose(std::size_t{1} << 24) == allreduce_algo::hierarchical);
    }
    CHECK(comms[0]->describe().find("hierarchical") != std::string::npos);
  }
  {
    auto comms = make_comms(4, tls, 20000, comm_net::automatic, [](int r) { return r < 3 ? 0 : 1; });
    CHECK(comms[3]->describe().find("2 hosts of 1 to 3 ranks") != std::string::npos);
    CHECK(comms[3]->describe().find("by one rank per host") != std::string::npos);
  }
  auto apart = make_comms(3, tls, 20000, comm_net::automatic, [](int r) { return r; }); // one rank per host
  for (const auto& c : apart) {
    CHECK(!c->hierarchical());
    CHECK(c->choose(1) == allreduce_algo::recursive_doubling);
  }
  std::vector<float> x(4);
  CHECK_THROWS_WITH(apart[0]->allreduce(x.data(), x.size(), allreduce_algo::hierarchical),
                    Catch::Contains("hierarchical sums need 2 or more hosts, some of 2 or more ranks"));
  // --net sockets asks for TCP between the ranks of a host too: every rank, the lone one as well, stays flat.
  auto sockets = make_comms(3, tls, 20000, comm_net::sockets, [](int r) { return r < 2 ? 0 : 1; });
  for (const auto& c : sockets)
    CHECK(!c->hierarchical());
}

TEST_CASE("hierarchical comm: a silent rank is named within the timeout and nothing hangs") {
  auto comms = make_comms(4, tls, 400, comm_net::automatic, [](int r) { return r / 2; });
  std::vector<std::vector<float>> bufs(3, std::vector<float>(100000, 1.f));
  const auto errors = on_every_rank(3, [&](int r) { // rank 3 (host 1, with rank 2) never calls
    comms[static_cast<std::size_t>(r)]->allreduce(bufs[static_cast<std::size_t>(r)].data(), 100000);
  });
  INFO(errors[0] << " / " << errors[1] << " / " << errors[2]);
  for (const auto& e : errors)
    CHECK(!e.empty());
  CHECK(errors[1].find("rank 3") != std::string::npos); // its partner across
  CHECK(errors[2].find("rank 3") != std::string::npos); // its partner on its host
  std::vector<float> x(4);
  CHECK_THROWS_WITH(comms[0]->allreduce(x.data(), x.size()), Catch::Contains("failed earlier"));
}

TEST_CASE("hierarchical comm: a silent rank alone on its host is named by its partner and nothing hangs") {
  auto comms = make_comms(3, tls, 400, comm_net::automatic, [](int r) { return r < 2 ? 0 : 1; });
  std::vector<std::vector<float>> bufs(2, std::vector<float>(100000, 1.f));
  const auto errors = on_every_rank(2, [&](int r) { // rank 2 (alone on host 1) never calls
    comms[static_cast<std::size_t>(r)]->allreduce(bufs[static_cast<std::size_t>(r)].data(), 100000);
  });
  INFO(errors[0] << " / " << errors[1]);
  CHECK(errors[0].find("rank 2") != std::string::npos); // its partner across
  CHECK(!errors[1].empty());                            // rank 1 learns from rank 0, its host's owner
}

TEST_CASE("hierarchical comm: flat collectives after hierarchical ones find every rank at the same collective") {
  // Ranks make unequal numbers of calls across hosts: a local index past
  // the smallest host's count makes none, and with 2 segments of 131072
  // and 131073 floats (262145 floats, pieces of 131072) owner 0's second
  // slice is empty while owner 1's is not. A flat allreduce after them
  // must still match every rank's messages.
  struct shape {
    int ranks;
    std::function<int(int)> host_of;
    std::size_t count;
  };
  const std::size_t q = shm_allreduce::half_floats / 2;
  const std::vector<shape> shapes = {{4, [](int r) { return r / 2; }, 2 * q + 1}, {4, [](int r) { return r < 3 ? 0 : 1; }, 5000}};
  for (const auto& sh : shapes) {
    INFO(sh.ranks << " ranks, " << sh.count << " floats");
    auto comms = make_comms(sh.ranks, tls, 3000, comm_net::automatic, sh.host_of);
    std::vector<std::vector<float>> bufs(static_cast<std::size_t>(sh.ranks), std::vector<float>(sh.count, 1.f));
    const auto errors = on_every_rank(sh.ranks, [&](int r) {
      auto& c = *comms[static_cast<std::size_t>(r)];
      auto& b = bufs[static_cast<std::size_t>(r)];
      c.allreduce(b.data(), b.size(), allreduce_algo::hierarchical);
      c.barrier();
      c.allreduce(b.data(), b.size(), allreduce_algo::recursive_doubling);
      c.allreduce(b.data(), b.size(), allreduce_algo::hierarchical);
    });
    for (const auto& e : errors)
      REQUIRE(e == "");
    const float want = static_cast<float>(sh.ranks * sh.ranks * sh.ranks);
    for (const auto& b : bufs)
      CHECK(std::count(b.begin(), b.end(), want) == static_cast<std::ptrdiff_t>(b.size()));
  }
}
