// Streaming DiLoCo (ps_options::streaming) as CAF actors in one process:
// one fragment without delay is DiLoCo bit for bit; fragments on
// staggered schedules, with and without overlap, repeat bit for bit
// whatever order the pushes arrive in and send what their schedules say;
// fragments are whole tensors.
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "reference.hpp"
#include "topology_support.hpp"
#include "scheduler/runtime/ps_wiring.hpp"

#include <catch2/catch.hpp>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;

namespace {

scheduler::topology_setup streaming_setup(int fragments, int delay) {
  auto setup = small_setup(3, std::max(1, fragments), true);
  setup.family = &scheduler::diloco_family;
  setup.ps.local_steps = 6;
  setup.ps.outer = true;
  setup.ps.outer_lr = 0.7f;
  setup.ps.outer_momentum = 0.9f;
  setup.ps.fragments = fragments;
  setup.ps.sync_delay = delay;
  setup.steps = 20; // not a multiple of 6: the last step syncs what is left
  return setup;
}

/// A worker's bytes sent over the run: each fragment's parameters at each
/// push its schedule makes, and at the last step whatever it had not just
/// pushed.
std::int64_t bytes_by_schedule(const scheduler::topology_setup& setup) {
  const model m(setup.spec, kernels::device::cpu(), setup.seed);
  const auto ranges = scheduler::fragment_ranges(layout_of(setup.spec), m.size(), setup.ps.fragments);
  std::int64_t bytes = 0;
  for (int p = 0; p < setup.ps.fragments; ++p) {
    const auto& [b, e] = ranges[static_cast<std::size_t>(p)];
    const std::int64_t off = setup.ps.fragment_offset(p);
    std::int64_t pushes = 0;
    for (std::int64_t s = off; s <= setup.steps; s += setup.ps.local_steps)
      ++pushes;
    const bool last_due = setup.steps >= off && (setup.steps - off) % setup.ps.local_steps == 0;
    bytes += (pushes + (last_due ? 0 : 1)) * static_cast<std::int64_t>(e - b) * 4;
  }
  return bytes;
}

} // namespace

TEST_CASE("streaming DiLoCo with one fragment and no delay is DiLoCo, bit for bit") {
  // Fragment 0 of 1 is pushed every H steps from step H, and the last step
  // syncs: DiLoCo's rounds, through another worker.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 51);
  const auto diloco = streaming_setup(0, 0);
  const auto one = streaming_setup(1, 0);
  REQUIRE_FALSE(diloco.ps.streaming());
  REQUIRE(one.ps.streaming());
  const auto a = scheduler::run_topology(*env.sys, diloco, data);
  const auto b = scheduler::run_topology(*env.sys, one, data);
  CHECK(a.params == b.params);
  for (std::size_t r = 0; r < a.reports.size(); ++r)
    CHECK(a.reports[r].bytes_sent == b.reports[r].bytes_sent);
}

TEST_CASE("streaming DiLoCo: 3 fragments, overlapped or not, repeat bit for bit with the pushes in any order") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 52);
  std::vector<float> first_of_each;
  for (int delay : {0, 1}) {
    INFO("sync_delay " << delay);
    auto setup = streaming_setup(3, delay);
    setup.ps.merge_alpha = 0.5f;
    std::vector<std::vector<float>> models;
    for (int slow = -1; slow < setup.workers; ++slow) {
      setup.worker_delay_ms.assign(3, 0.0);
      if (slow >= 0) // its pushes arrive last, fragment after fragment
        setup.worker_delay_ms[static_cast<std::size_t>(slow)] = 3.0;
      const auto out = scheduler::run_topology(*env.sys, setup, data);
      for (const auto& rep : out.reports) {
        CHECK(rep.error.empty());
        CHECK(rep.steps == setup.steps);
        CHECK(rep.bytes_sent == bytes_by_schedule(setup));
      }
      models.push_back(out.params);
    }
    for (std::size_t k = 1; k < models.size(); ++k) {
      INFO("worker " << k - 1 << " slowed");
      CHECK(models[k] == models[0]);
    }
    const auto [before, after] = losses(setup, models[0], data);
    INFO("loss " << before << " -> " << after);
    CHECK(after < 0.7 * before);
    if (first_of_each.empty())
      first_of_each = models[0];
    else
      CHECK(models[0] != first_of_each); // the overlap changes the run
  }
}

TEST_CASE("streaming DiLoCo: the merge keeps the share of the replica's own progress it is given") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 53);
  auto setup = streaming_setup(2, 1);
  const auto replace = scheduler::run_topology(*env.sys, setup, data);
  setup.ps.merge_alpha = 0.5f;
  const auto half = scheduler::run_topology(*env.sys, setup, data);
  CHECK(replace.params != half.params);
}

TEST_CASE("streaming fragments are whole tensors covering the buffer, near equal shares") {
  model_spec spec;
  spec.hidden = {256, 128}; // 784x256, 256, 256x128, 128, 128x10, 10
  const model m(spec, kernels::device::cpu(), 1);
  const auto layout = layout_of(spec);
  for (int parts = 1; parts <= 6; ++parts) {
    INFO(parts << " fragments");
    const auto r = scheduler::fragment_ranges(layout, m.size(), parts);
    REQUIRE(r.size() == static_cast<std::size_t>(parts));
    CHECK(r.front().first == 0);
    CHECK(r.back().second == m.size());
    for (std::size_t i = 0; i < r.size(); ++i) {
      CHECK(r[i].second > r[i].first);
      if (i + 1 < r.size())
        CHECK(r[i].second == r[i + 1].first);
      CHECK(std::find(layout.offsets.begin(), layout.offsets.end(), r[i].first) != layout.offsets.end());
    }
  }
  // Two fragments: the first layer's weight (784 x 256 of 235k values) is a fragment alone.
  const auto two = scheduler::fragment_ranges(layout, m.size(), 2);
  CHECK(two[0].second == layout.offsets[1]);
  CHECK_THROWS_WITH(scheduler::fragment_ranges(layout, m.size(), 7), Catch::Contains("6 tensors"));
}

TEST_CASE("streaming DiLoCo: a fragment spread over several shards is the same run, bit for bit") {
  // The shards average and step element by element: cutting a fragment
  // into pieces on 2 shards changes where each value is summed, not how.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 54);
  auto one = streaming_setup(3, 1);
  auto two = one;
  two.ps.shards = 6;
  const auto a = scheduler::run_topology(*env.sys, one, data);
  const auto b = scheduler::run_topology(*env.sys, two, data);
  CHECK(a.params == b.params);
  for (std::size_t r = 0; r < a.reports.size(); ++r) {
    CHECK(b.reports[r].error.empty());
    CHECK(a.reports[r].bytes_sent == b.reports[r].bytes_sent);
  }
  two.ps.shards = 5; // not a multiple of the fragments
  CHECK_THROWS_WITH(scheduler::run_topology(*env.sys, two, data), Catch::Contains("a multiple of it in shards"));
}
