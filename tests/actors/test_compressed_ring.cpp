// Compressed rings (transport.compress) as CAF actors in one process: the
// replicas stay equal and repeat bit for bit whatever order the payloads
// arrive in, and a payload that keeps every value is the dense ring's mean.
#include "models/dataset.hpp"
#include "reference.hpp"
#include "topology_support.hpp"

#include <catch2/catch.hpp>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;
using scheduler::topology_kind;

namespace {

scheduler::topology_setup compressed_setup(compress_mode mode, double ratio) {
  auto setup = small_setup(3, 1, true);
  setup.kind = topology_kind::ring;
  setup.compress.mode = mode;
  setup.compress.ratio = ratio;
  return setup;
}

} // namespace

TEST_CASE("compressed ring: every mode repeats bit for bit with the payloads' arrival order varied") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 23);
  for (auto mode : {compress_mode::bf16, compress_mode::topk, compress_mode::randk, compress_mode::sign, compress_mode::int8,
                    compress_mode::powersgd}) {
    INFO(compress_name(mode));
    auto setup = compressed_setup(mode, 0.05);
    const auto first = scheduler::run_topology(*env.sys, setup, data);
    // Another order: worker 0 late by a few ms a step, then worker 2.
    setup.worker_delay_ms = {3.0, 0.0, 0.0};
    const auto late0 = scheduler::run_topology(*env.sys, setup, data);
    setup.worker_delay_ms = {0.0, 0.0, 3.0};
    setup.worker_jitter_ms = {1.0, 1.0, 1.0};
    const auto late2 = scheduler::run_topology(*env.sys, setup, data);
    for (const auto* out : {&first, &late0, &late2}) {
      CHECK(out->replica_spread == 0.0);
      for (const auto& rep : out->reports) {
        CHECK(rep.error.empty());
        CHECK(rep.steps == setup.steps);
        CHECK(rep.bytes_sent > 0);
      }
    }
    CHECK(late0.params == first.params);
    CHECK(late2.params == first.params);
  }
}

TEST_CASE("compressed ring: top-k keeping every value is the dense ring's mean, to rounding") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 24);
  auto setup = compressed_setup(compress_mode::topk, 1.0);
  const auto out = scheduler::run_topology(*env.sys, setup, data);
  gwtest::check_close(out.params, joint_batch_reference(setup, data), 1e-4, 1e-5);
  // Error feedback holds nothing back when everything is sent, so the
  // result does not depend on it.
  setup.compress.error_feedback = false;
  CHECK(scheduler::run_topology(*env.sys, setup, data).params == out.params);
}
