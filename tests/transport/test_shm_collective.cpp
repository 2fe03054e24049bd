// Sums through shared memory (transport/shm_collective.hpp), as the
// collective communicator uses them when every rank is on this host: the
// exact sum on every rank, the ring's bits, across pieces and halves,
// whichever rank arrives first; a rank that calls with another size or
// falls silent is named and nothing hangs; nothing is left in /dev/shm;
// a peer cannot make a rank map anything but a collective segment.
#include "comm_support.hpp"
#include "kernels/error.hpp"
#include "transport/shm_arena.hpp"
#include "transport/shm_collective.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

using namespace gradwire;
using namespace gradwire::comm_fixture;
using transport::shm_allreduce;

namespace {

/// This process's names in /dev/shm.
std::size_t own_segments() {
  const std::string prefix = "gradwire-" + std::to_string(::getpid()) + "-";
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

/// Every rank sums `count` floats twice: through the ring over UCX and
/// through shared memory, from the same inputs, ranks arriving in a
/// varied order; both must hold the same bits on every rank.
void same_bits_as_ring(std::vector<std::unique_ptr<ucx_comm>>& comms, std::size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<float>> ring(comms.size(), std::vector<float>(count)), shm = ring;
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i)
      ring[static_cast<std::size_t>(r)][i] = shm[static_cast<std::size_t>(r)][i] = input(r, i);
  const auto errors = on_every_rank(n, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    std::this_thread::sleep_for(std::chrono::microseconds((count * 7 + i * 1301) % 2000)); // arrival order
    comms[i]->allreduce(ring[i].data(), count, allreduce_algo::ring);
    comms[i]->allreduce(shm[i].data(), count, allreduce_algo::shared_memory);
  });
  for (const auto& e : errors)
    REQUIRE(e == "");
  for (int r = 0; r < n; ++r)
    REQUIRE(std::memcmp(ring[0].data(), shm[static_cast<std::size_t>(r)].data(), count * sizeof(float)) == 0);
}

} // namespace

TEST_CASE("shm collective: sums are exact and the same on every rank from 2 to 6 ranks") {
  for (int n : {2, 3, 4, 5, 6}) {
    INFO("ranks " << n);
    check_sums(n, "posix,sysv,self", allreduce_algo::shared_memory, counts);
  }
}

TEST_CASE("shm collective: the ring's bits on 3 and 4 ranks across pieces and halves") {
  const std::size_t half = shm_allreduce::half_floats;
  for (int n : {3, 4}) {
    INFO("ranks " << n);
    auto comms = make_comms(n, "posix,sysv,self");
    // Fewer floats than ranks, one piece, a piece's edge, several pieces
    // (each half used more than once) with segments of unequal length.
    for (std::size_t count : {std::size_t{2}, std::size_t{1000}, half, half + 1, 3 * half + 7}) {
      INFO("count " << count);
      same_bits_as_ring(comms, count);
    }
  }
}

TEST_CASE("shm collective: auto sums through shared memory only when every rank is on this host") {
  {
    auto comms = make_comms(3, "posix,sysv,self");
    for (const auto& c : comms) {
      CHECK(c->by_shared_memory());
      CHECK(c->choose(1) == allreduce_algo::shared_memory);
      CHECK(c->choose(std::size_t{1} << 24) == allreduce_algo::shared_memory);
    }
    CHECK(comms[0]->describe().find("sums through shared memory") != std::string::npos);
  }
  // Two hosts of two ranks: hierarchical (test_comm_hierarchy.cpp), never all through shared memory.
  auto mixed = make_comms(4, "posix,sysv,tcp,self", 20000, comm_net::automatic, [](int r) { return r / 2; });
  for (const auto& c : mixed) {
    CHECK(!c->by_shared_memory());
    CHECK(c->choose(1) == allreduce_algo::hierarchical);
  }
  std::vector<float> x(4);
  CHECK_THROWS_WITH(mixed[0]->allreduce(x.data(), x.size(), allreduce_algo::shared_memory),
                    Catch::Contains("need every rank on this host"));
}

TEST_CASE("shm collective: no segment is left in /dev/shm once the ranks are connected") {
  const auto before = own_segments();
  auto comms = make_comms(4, "posix,sysv,self");
  CHECK(own_segments() == before);
  comms.clear();
  CHECK(own_segments() == before);
}

TEST_CASE("shm collective: a rank that calls with another size is named by both") {
  auto comms = make_comms(2, "posix,sysv,self");
  std::vector<float> a(100, 1.f), b(90, 1.f);
  const auto errors = on_every_rank(2, [&](int r) {
    if (r == 0)
      comms[0]->allreduce(a.data(), a.size());
    else
      comms[1]->allreduce(b.data(), b.size());
  });
  INFO(errors[0] << " / " << errors[1]);
  CHECK(errors[0].find("rank 1 called with 90 floats, this rank with 100") != std::string::npos);
  // Rank 1 names rank 0, or learns that rank 0 gave up first.
  CHECK((errors[1].find("rank 0 called with 100 floats, this rank with 90") != std::string::npos ||
         errors[1].find("rank 0 gave up") != std::string::npos));
  std::vector<float> c(4, 1.f);
  CHECK_THROWS_WITH(comms[0]->allreduce(c.data(), c.size()), Catch::Contains("failed earlier"));
}

TEST_CASE("shm collective: a silent rank is named within the timeout and nothing hangs") {
  auto comms = make_comms(3, "posix,sysv,self", 300);
  std::vector<float> a(1000, 1.f), b(1000, 1.f);
  const auto errors = on_every_rank(2, [&](int r) { // rank 2 never calls
    comms[static_cast<std::size_t>(r)]->allreduce(r == 0 ? a.data() : b.data(), 1000);
  });
  INFO(errors[0] << " / " << errors[1]);
  for (const auto& e : errors)
    CHECK((e.find("no word from rank 2 for 300 ms") != std::string::npos || e.find("gave up") != std::string::npos));
  CHECK((errors[0].find("rank 2") != std::string::npos || errors[1].find("rank 2") != std::string::npos));
}

TEST_CASE("shm collective: a peer cannot name anything but a collective segment") {
  shm_allreduce mine(0, 2, 1000, true);
  CHECK_THROWS_WITH(mine.connect({"", "/etc-passwd"}), Catch::Contains("rank 1's segment has no gradwire segment name"));
  CHECK_THROWS_WITH(mine.connect({"", "/gradwire-1-2-x"}), Catch::Contains("no gradwire segment name"));
  CHECK_THROWS_WITH(mine.connect({"", "/gradwire-" + std::to_string(::getpid()) + "-7-999999999"}),
                    Catch::Contains("mapping a peer's shared memory"));
  // Another of gradwire's names, large enough, but not a collective segment.
  auto other = std::make_shared<transport::shm_arena>("/gradwire-" + std::to_string(::getpid()) + "-9-1", 16 << 20);
  CHECK_THROWS_WITH(mine.connect({"", other->name()}), Catch::Contains("is not a collective segment"));
  // A collective segment of the wrong rank.
  shm_allreduce third(0, 2, 1000, true);
  CHECK_THROWS_WITH(mine.connect({"", third.name()}), Catch::Contains("says rank 0 of 2"));
  CHECK(transport::is_arena_name(transport::arena_name(3)));
  CHECK(!transport::is_arena_name("/gradwire-12-0-345/../x"));
}
