// Speed balancing's rule: the global batch is kept, the split follows the
// measured speeds and fixed costs, within the limits.
#include "actors/batch_balance.hpp"
#include "kernels/error.hpp"

#include <catch2/catch.hpp>

#include <numeric>
#include <random>

using namespace gradwire;
using actors::balance_limits;
using actors::rebalance;
using actors::speed_sample;
using actors::speed_window;

namespace {

/// A window of `steps` steps at batch `b`: `per_sample` seconds a sample, `fixed` a step.
speed_sample window(int b, double per_sample, double fixed = 0, int steps = 10) {
  return {per_sample * b * steps, fixed * steps, static_cast<std::int64_t>(b) * steps, steps};
}

balance_limits full_step() {
  balance_limits l;
  l.gain = 1.0;
  return l;
}

} // namespace

TEST_CASE("balancing splits the global batch in proportion to speed") {
  // Worker 1 takes 3x as long a sample: 96 / 32 makes both steps 96 units.
  CHECK(rebalance({64, 64}, {window(64, 1), window(64, 3)}, full_step()) == std::vector<int>{96, 32});
  // Half the way with the default gain.
  CHECK(rebalance({64, 64}, {window(64, 1), window(64, 3)}, {}) == std::vector<int>{80, 48});
  // Already balanced: nothing moves.
  CHECK(rebalance({96, 32}, {window(96, 1), window(32, 3)}, {}) == std::vector<int>{96, 32});
  // Equal speeds even out unequal batches.
  CHECK(rebalance({100, 28}, {window(100, 2), window(28, 2)}, full_step()) == std::vector<int>{64, 64});
}

TEST_CASE("balancing counts each worker's per-step fixed cost") {
  // Same speed a sample, but worker 1 spends 32 samples' worth a step on
  // fixed work: it gets 32 fewer (80 + 0 = 48 + 32).
  CHECK(rebalance({64, 64}, {window(64, 1, 0), window(64, 1, 32)}, full_step()) == std::vector<int>{80, 48});
}

TEST_CASE("balancing keeps the sum and the limits, and leaves unmeasured workers' batches") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> speed(0.1, 20), fixed(0, 50);
  std::uniform_int_distribution<int> batch(4, 200);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 7;
    std::vector<int> b(static_cast<std::size_t>(n));
    std::vector<speed_sample> m;
    for (auto& x : b) {
      x = batch(rng);
      m.push_back(window(x, speed(rng), fixed(rng)));
    }
    const auto total = std::accumulate(b.begin(), b.end(), 0);
    balance_limits lim;
    lim.gain = trial % 2 ? 1.0 : 0.5;
    lim.min_batch = 3;
    lim.max_batch = std::max(total / n + 1, total / 2);
    const auto out = rebalance(b, m, lim);
    INFO("trial " << trial);
    REQUIRE(out.size() == b.size());
    CHECK(std::accumulate(out.begin(), out.end(), 0) == total);
    for (int x : out) {
      CHECK(x >= lim.min_batch);
      CHECK(x <= lim.max_batch);
    }
  }
  // Worker 2 has no measurements (no samples): it keeps 64; 0 and 1 split their 128.
  CHECK(rebalance({64, 64, 64}, {window(64, 1), window(64, 3), speed_sample{}}, full_step()) ==
        std::vector<int>{96, 32, 64});
  // A worker 100x slower is held at the floor.
  balance_limits floor8 = full_step();
  floor8.min_batch = 8;
  CHECK(rebalance({64, 64}, {window(64, 1), window(64, 100)}, floor8) == std::vector<int>{120, 8});
  CHECK(actors::default_min_batch(128, 2) == 4);
  CHECK(actors::default_min_batch(8, 4) == 1);
}

TEST_CASE("a window is charged at its lower median step: a spike in fewer than half its steps does not count") {
  speed_window w;
  for (int k = 0; k < 3; ++k)
    w.add_step(1e-3, 10); // 0.1 ms a sample
  w.add_step(50e-3, 10);  // one step held up 49 ms
  w.add_fixed(2e-3);
  auto s = w.take();
  CHECK(s.steps == 4);
  CHECK(s.samples == 40);
  CHECK(s.compute_seconds == Approx(4e-3)); // the mean would charge 53 ms
  CHECK(s.fixed_seconds == Approx(2e-3));
  // Two steps: the lower median is the faster one.
  w.add_step(30e-3, 16);
  w.add_step(1.6e-3, 16);
  s = w.take();
  CHECK(s.compute_seconds == Approx(3.2e-3));
  // A slowness in most steps counts in full, at whatever batch each step had.
  w.add_step(6e-3, 20);
  w.add_step(3e-3, 10);
  w.add_step(1e-3, 10);
  s = w.take();
  CHECK(s.samples == 40);
  CHECK(s.compute_seconds == Approx(0.3e-3 * 40));
  // take() began a fresh window; a step without samples is no rate.
  CHECK(w.steps() == 0);
  w.add_step(5e-3, 0);
  s = w.take();
  CHECK(s.steps == 1);
  CHECK(s.samples == 0);
  CHECK(s.compute_seconds == 0);
  // So a fast worker held up once in a window keeps its share against one 3x slower in every step.
  for (int k = 0; k < 3; ++k)
    w.add_step(k == 1 ? 0.2 : 64e-3, 64);
  speed_window slow;
  for (int k = 0; k < 3; ++k)
    slow.add_step(192e-3, 64);
  CHECK(rebalance({64, 64}, {w.take(), slow.take()}, full_step()) == std::vector<int>{96, 32});
}

TEST_CASE("balancing refuses what it cannot do, saying what") {
  CHECK_THROWS_WITH(rebalance({64, 64}, {window(64, 1)}, {}), Catch::Contains("1 measurements for 2 workers"));
  balance_limits tight;
  tight.min_batch = 100;
  CHECK_THROWS_WITH(rebalance({64, 64}, {window(64, 1), window(64, 1)}, tight),
                    Catch::Contains("global batch of 128 cannot be split 2 ways"));
}
