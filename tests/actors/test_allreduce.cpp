// Allreduce as CAF actors in one process: ring, direct and hierarchical,
// exact sums at every N, size, bucket and chunk, across rounds.
#include "actors/ring_allreduce.hpp"
#include "actors/ring_peer.hpp"
#include "kernels/bf16.hpp"
#include "actor_env.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <numeric>
#include <set>

using namespace gradwire;
using namespace gwtest;

namespace {

/// Worker r's input at element k: an integer, so every sum is exact in float.
float input(int r, std::size_t k, int round) {
  return static_cast<float>((r + 1 + round) * static_cast<int>(k % 13)) - 5.f;
}

/// The allreduce's exact result at element k: every worker's input summed.
float expected_sum(int n, std::size_t k, int round) {
  float want = 0;
  for (int w = 0; w < n; ++w)
    want += input(w, k, round);
  return want;
}

/// Every worker's input buffer for `round`.
std::vector<kernels::tensor> inputs(int n, std::size_t size, int round) {
  std::vector<kernels::tensor> grads;
  for (int r = 0; r < n; ++r) {
    auto g = kernels::tensor::empty({static_cast<std::int64_t>(size)});
    for (std::size_t k = 0; k < size; ++k)
      g.data()[k] = input(r, k, round);
    grads.push_back(g);
  }
  return grads;
}

/// Runs two rounds of allreduce on peers wired as `run_topology` wires
/// them, with this test's scoped actor as every worker, and checks every
/// piece against the exact sum. Returns the number of pieces checked.
std::size_t check_allreduce(caf::actor_system& sys, int n, std::size_t size, std::size_t bucket_floats,
                            std::size_t chunk_floats, const actors::ring_groups& groups, bool direct = false) {
  const auto buckets = actors::make_buckets(size, bucket_floats);
  auto peers = actors::spawn_ring_peers(sys, n, buckets, chunk_floats, groups, {}, direct);
  caf::scoped_actor self{sys};
  std::size_t checked = 0;
  for (int round = 0; round < 2; ++round) {
    const auto grads = inputs(n, size, round);
    for (int r = 0; r < n; ++r)
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        const auto [lo, hi] = buckets[b];
        self->send(peers[static_cast<std::size_t>(r)], actors::reduce_atom::value, std::int64_t{round},
                   static_cast<int>(b), grads[static_cast<std::size_t>(r)].view(lo, {static_cast<std::int64_t>(hi - lo)}),
                   1.f);
      }
    // Every peer answers each bucket once; the pieces cover it exactly.
    std::vector<int> coverage(size, 0);
    std::size_t replies = 0;
    std::string failure;
    while (replies < static_cast<std::size_t>(n) * buckets.size() && failure.empty())
      self->receive(
        [&](actors::reduced_atom, std::int64_t r, int b, actors::pieces ps, double) {
          CHECK(r == round);
          CHECK(b >= 0);
          ++replies;
          for (const auto& p : ps)
            for (std::int64_t i = 0; i < p.data.numel(); ++i) {
              const std::size_t k = p.offset + static_cast<std::size_t>(i);
              const float want = expected_sum(n, k, round);
              if (p.data.data()[i] != want)
                failure = "element " + std::to_string(k) + ": " + std::to_string(p.data.data()[i]) + " != " +
                          std::to_string(want);
              ++coverage[k];
              ++checked;
            }
        },
        [&](actors::reduce_failed_atom, std::int64_t, std::string err) { failure = err; },
        caf::after(std::chrono::seconds(10)) >> [&] { failure = "no reply within 10 s"; });
    INFO("N = " << n << ", round " << round);
    REQUIRE(failure.empty());
    CHECK(std::all_of(coverage.begin(), coverage.end(), [&](int c) { return c == n; }));
  }
  for (const auto& p : peers)
    self->send_exit(p, caf::exit_reason::user_shutdown);
  return checked;
}

} // namespace

TEST_CASE("ring allreduce: exact sums for N = 1..8, sizes not divisible by N, many chunks and buckets") {
  actor_env env;
  for (int n = 1; n <= 8; ++n) {
    const std::size_t size = 1000 + 7 * static_cast<std::size_t>(n) + 3; // not a multiple of N or of 16
    // Three buckets, chunks of 5 floats: every segment is several chunks.
    CHECK(check_allreduce(*env.sys, n, size, size / 3 + 1, 5, {}) == 2 * size * static_cast<std::size_t>(n));
  }
  // A bucket smaller than N: some segments are empty.
  CHECK(check_allreduce(*env.sys, 8, 5, 5, 2, {}) == 2 * 5 * 8);
}

TEST_CASE("ring allreduce: results held across rounds keep their sums and buffers let go of are reused the next round") {
  // The owners' final buffers are pooled across rounds: one still held (by
  // a worker, or a peer yet to release it) must never be written again.
  actor_env env;
  constexpr int n = 3;
  constexpr std::size_t size = 999;
  const auto buckets = actors::make_buckets(size, size);
  auto peers = actors::spawn_ring_peers(*env.sys, n, buckets, 64, {});
  caf::scoped_actor self{*env.sys};
  std::vector<std::pair<int, actors::pieces>> kept; // (round, peer 0's result), held to the end
  auto sum_ok = [](int round, const actors::pieces& ps) {
    for (const auto& p : ps)
      for (std::int64_t i = 0; i < p.data.numel(); ++i) {
        if (p.data.data()[i] != expected_sum(n, p.offset + static_cast<std::size_t>(i), round))
          return false;
      }
    return true;
  };
  std::vector<std::set<const float*>> buffers; // per round: where peer 0's result lies
  for (int round = 0; round < 7; ++round) {
    const auto grads = inputs(n, size, round);
    for (int r = 0; r < n; ++r)
      self->send(peers[static_cast<std::size_t>(r)], actors::reduce_atom::value, std::int64_t{round}, 0,
                 grads[static_cast<std::size_t>(r)], 1.f);
    int replies = 0;
    std::string failure;
    actors::pieces mine;
    while (replies < n && failure.empty())
      self->receive(
        [&](actors::reduced_atom, std::int64_t, int, actors::pieces ps, double) {
          ++replies;
          if (!sum_ok(round, ps))
            failure = "wrong sum";
          if (self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(peers[0]))
            mine = std::move(ps);
        },
        [&](actors::reduce_failed_atom, std::int64_t, std::string err) { failure = err; },
        caf::after(std::chrono::seconds(10)) >> [&] { failure = "no reply within 10 s"; });
    INFO("round " << round);
    REQUIRE(failure.empty());
    REQUIRE(!mine.empty());
    std::set<const float*> at;
    for (const auto& p : mine)
      at.insert(p.data.data());
    buffers.push_back(at);
    if (round < 3)
      kept.emplace_back(round, std::move(mine));
  }
  for (const auto& [round, ps] : kept) {
    INFO("held result of round " << round);
    CHECK(sum_ok(round, ps)); // unchanged by the rounds after it
  }
  CHECK(buffers[5] == buffers[6]); // let go at once: the same buffers again
  for (const auto& p : peers)
    self->send_exit(p, caf::exit_reason::user_shutdown);
}

TEST_CASE("direct allreduce: exact sums for N = 1..8, chunks straight to their owners and back") {
  actor_env env;
  for (int n = 1; n <= 8; ++n) {
    INFO("N = " << n);
    const std::size_t size = 1000 + 7 * static_cast<std::size_t>(n) + 3;
    CHECK(check_allreduce(*env.sys, n, size, size / 3 + 1, 5, {}, true) == 2 * size * static_cast<std::size_t>(n));
  }
  CHECK(check_allreduce(*env.sys, 8, 5, 5, 2, {}, true) == 2 * 5 * 8);
}

TEST_CASE("hierarchical allreduce: exact sums for N = 1..8 and group sizes 1..3") {
  actor_env env;
  for (int n = 1; n <= 8; ++n)
    for (int g = 1; g <= 3; ++g) {
      INFO("N = " << n << ", groups of " << g);
      const std::size_t size = 517 + static_cast<std::size_t>(n);
      CHECK(check_allreduce(*env.sys, n, size, 200, 7, actors::consecutive_groups(n, g)) == 2 * size * static_cast<std::size_t>(n));
    }
}

TEST_CASE("hierarchical allreduce: exact sums in groups of unequal sizes and of ranks far apart") {
  actor_env env;
  // Hosts of 3 ranks and 1; of 2, 3 and 1 interleaved (srun's cyclic
  // placement); one group of all; every rank its own group.
  const std::vector<actors::ring_groups> tables = {
    {0, 0, 0, 1}, {7, 3, 7, 3, 3, 9}, {5, 5, 5}, {4, 2, 9, 1, 0}};
  for (const auto& groups : tables) {
    const int n = static_cast<int>(groups.size());
    INFO("N = " << n);
    const std::size_t size = 611 + static_cast<std::size_t>(n);
    CHECK(check_allreduce(*env.sys, n, size, 250, 7, groups) == 2 * size * static_cast<std::size_t>(n));
  }
}

TEST_CASE("hierarchical allreduce: groups by the order of their lowest rank and leaders wired to the next group") {
  const actors::ring_groups groups = {7, 3, 7, 3, 3, 9}; // groups {0, 2}, {1, 3, 4}, {5}
  const std::vector<std::pair<std::size_t, std::size_t>> buckets = {{0, 10}};
  auto pc = actors::ring_peer_layout(4, 6, buckets, 5, groups);
  CHECK(pc.hierarchical);
  CHECK(pc.group == 1);
  CHECK(pc.group_pos == 2);
  CHECK(pc.group_size == 3);
  CHECK(pc.groups == 3);
  auto w = actors::ring_peer_wiring(4, 6, groups); // the last of its group: back to the group's leader
  CHECK(w.right == 1);
  CHECK(w.leader_right == -1);
  CHECK(w.members.empty());
  w = actors::ring_peer_wiring(1, 6, groups); // a leader: its group's members, and the next group's leader
  CHECK(w.right == 3);
  CHECK(w.leader_right == 5);
  CHECK(w.members == std::vector<int>{3, 4});
  w = actors::ring_peer_wiring(5, 6, groups); // alone in its group, leader of the last: back to group 0's
  CHECK(w.right == 5);
  CHECK(w.leader_right == 0);
  CHECK(actors::consecutive_groups(5, 2) == actors::ring_groups{0, 0, 1, 1, 2});
  CHECK(actors::consecutive_groups(5, 0).empty());
  CHECK_THROWS_WITH(actors::ring_peer_layout(0, 4, buckets, 5, {0, 0, 1}), Catch::Contains("3 group entries for 4 ranks"));
}

TEST_CASE("ring allreduce with bf16 chunks: every hop's sum rounded as defined, the owner's rounding for all") {
  // Inputs of 17 significant bits, so that each rounding to bf16 shows.
  actor_env env;
  const std::size_t size = 301, bucket_floats = 160, chunk_floats = 7;
  const auto buckets = actors::make_buckets(size, bucket_floats);
  const auto round_bf16 = [](float x) { return kernels::from_bf16(kernels::to_bf16(x)); };
  const auto value = [](int r, std::size_t k) { return 1.f + static_cast<float>((37 * r + 11 * k) % 1000) / 65536.f; };
  for (int n : {2, 3, 5}) {
    INFO("N = " << n);
    std::vector<caf::actor> peers;
    for (int r = 0; r < n; ++r) {
      auto pc = actors::ring_peer_layout(r, n, buckets, chunk_floats, {});
      pc.wire_bf16 = true;
      peers.push_back(actors::spawn_ring_peer(*env.sys, pc));
    }
    for (int r = 0; r < n; ++r)
      caf::anon_send(peers[static_cast<std::size_t>(r)], actors::peer_wire_atom::value,
                     peers[static_cast<std::size_t>((r + 1) % n)], caf::actor{}, std::vector<caf::actor>{});
    caf::scoped_actor self{*env.sys};
    std::vector<kernels::tensor> grads;
    for (int r = 0; r < n; ++r) {
      grads.push_back(kernels::tensor::empty({static_cast<std::int64_t>(size)}));
      for (std::size_t k = 0; k < size; ++k)
        grads.back().data()[k] = value(r, k);
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        const auto [lo, hi] = buckets[b];
        self->send(peers[static_cast<std::size_t>(r)], actors::reduce_atom::value, std::int64_t{0}, static_cast<int>(b),
                   grads.back().view(lo, {static_cast<std::int64_t>(hi - lo)}), 0.5f);
      }
    }
    // Element k of a bucket's segment s: peer s sends its value rounded, each
    // next peer adds its own and rounds what it sends, and the owner (s - 1)
    // rounds (sum x 0.5) once for everyone.
    const auto want = [&](std::size_t k) {
      std::size_t b = 0;
      while (k >= buckets[b].second || k < buckets[b].first)
        ++b;
      const auto len = buckets[b].second - buckets[b].first, rel = k - buckets[b].first;
      int s = 0;
      while (rel >= len * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(n))
        ++s;
      float sum = round_bf16(value(s, k));
      for (int h = 1; h < n; ++h) {
        sum += value((s + h) % n, k);
        sum = h < n - 1 ? round_bf16(sum) : round_bf16(sum * 0.5f);
      }
      return sum;
    };
    std::size_t replies = 0, mismatches = 0, checked = 0;
    std::string failure;
    while (replies < static_cast<std::size_t>(n) * buckets.size() && failure.empty())
      self->receive(
        [&](actors::reduced_atom, std::int64_t, int, actors::pieces ps, double) {
          ++replies;
          for (const auto& p : ps)
            for (std::int64_t i = 0; i < p.data.numel(); ++i, ++checked)
              mismatches += p.data.data()[i] != want(p.offset + static_cast<std::size_t>(i));
        },
        [&](actors::reduce_failed_atom, std::int64_t, std::string err) { failure = err; },
        caf::after(std::chrono::seconds(10)) >> [&] { failure = "no reply within 10 s"; });
    REQUIRE(failure.empty());
    CHECK(checked == static_cast<std::size_t>(n) * size);
    CHECK(mismatches == 0);
    for (const auto& p : peers)
      self->send_exit(p, caf::exit_reason::user_shutdown);
  }
}
