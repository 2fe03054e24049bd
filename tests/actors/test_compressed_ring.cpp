// Compressed rings (compression.kind) as CAF actors in one process: the
// replicas stay equal and repeat bit for bit whatever order the payloads
// arrive in, and a payload that keeps every value is the dense ring's mean.
#include "models/dataset.hpp"
#include "reference.hpp"
#include "topology_support.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <catch2/catch.hpp>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;

namespace {

scheduler::topology_setup compressed_setup(compress_mode mode, double ratio) {
  auto setup = small_setup(3, 1, true);
  setup.family = &scheduler::ring_family;
  setup.compress.mode = mode;
  setup.compress.ratio = ratio;
  return setup;
}

/// Runs `setup`, then again with worker `late` 3 ms behind each step: the
/// replicas agree and the second run holds the first's bits. Returns the first.
scheduler::topology_outcome same_bits_when_late(actor_env& env, scheduler::topology_setup setup,
                                                const dataset& data, int late) {
  const auto first = scheduler::run_topology(*env.sys, setup, data);
  setup.worker_delay_ms.assign(static_cast<std::size_t>(setup.workers), 0.0);
  setup.worker_delay_ms[static_cast<std::size_t>(late)] = 3.0;
  const auto again = scheduler::run_topology(*env.sys, setup, data);
  CHECK(first.replica_spread == 0.0);
  CHECK(again.params == first.params);
  return first;
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
        // Each step's compression error counted, a share of what was compressed.
        CHECK(rep.compressed_steps == setup.steps);
        const double mean = rep.compress_error_sum / static_cast<double>(rep.compressed_steps);
        CHECK(mean >= 0.0);
        CHECK(mean < 1.0);
        if (mode == compress_mode::topk || mode == compress_mode::powersgd)
          CHECK(mean > 0.0);
      }
    }
    CHECK(late0.params == first.params);
    CHECK(late2.params == first.params);
    for (const auto& a : first.reports) // the same payloads, the same errors
      for (const auto& b : late2.reports)
        if (a.rank == b.rank)
          CHECK(b.compress_error_sum == a.compress_error_sum);
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

namespace {

scheduler::topology_setup bf16_wire_setup(int workers) {
  auto setup = small_setup(workers, 1, true);
  setup.family = &scheduler::ring_family;
  setup.ring.sharded_update = false;
  setup.ring.wire_bf16 = true;
  setup.ring.bucket_floats = 4096; // several buckets, chunks of uneven length
  setup.ring.chunk_floats = 1001;
  return setup;
}

} // namespace

TEST_CASE("a ring with bf16 chunks: the same bits on any arrival order, half the bytes, near the fp32 ring") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 31);
  for (int workers : {3, 4}) {
    INFO(workers << " workers");
    auto setup = bf16_wire_setup(workers);
    const auto first = scheduler::run_topology(*env.sys, setup, data);
    setup.worker_delay_ms.assign(static_cast<std::size_t>(workers), 0.0);
    setup.worker_delay_ms[0] = 3.0; // worker 0 late, then the last with jitter
    const auto late0 = scheduler::run_topology(*env.sys, setup, data);
    setup.worker_delay_ms[0] = 0.0;
    setup.worker_delay_ms.back() = 3.0;
    setup.worker_jitter_ms.assign(static_cast<std::size_t>(workers), 1.0);
    const auto late_last = scheduler::run_topology(*env.sys, setup, data);
    for (const auto* out : {&first, &late0, &late_last}) {
      CHECK(out->replica_spread == 0.0); // every replica decoded the owners' words
      for (const auto& rep : out->reports)
        CHECK(rep.error.empty());
    }
    CHECK(late0.params == first.params);
    CHECK(late_last.params == first.params);
    // The fp32 ring on the same batches: bytes twice as many (a chunk of
    // odd length rounds its words up), parameters within bf16's rounding.
    auto dense = bf16_wire_setup(workers);
    dense.ring.wire_bf16 = false;
    const auto fp32 = scheduler::run_topology(*env.sys, dense, data);
    CHECK_FALSE(fp32.params == first.params);
    std::int64_t sent = 0, sent32 = 0;
    for (std::size_t r = 0; r < first.reports.size(); ++r) {
      sent += first.reports[r].bytes_sent;
      sent32 += fp32.reports[r].bytes_sent;
    }
    CHECK(sent >= sent32 / 2);
    CHECK(sent <= sent32 / 2 + sent32 / 200);
    gwtest::check_close(first.params, fp32.params, 2e-2, 1e-3);
  }
}

TEST_CASE("compressed ring with a dense warm-up: warm-up steps are the dense ring's, bit for bit, then compression") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 32);
  auto setup = compressed_setup(compress_mode::topk, 0.05);
  setup.opt.kind = "adamw";
  setup.opt.lr = 2e-3f;
  setup.ring.sharded_update = false;
  // Every step a warm-up step: the dense ring's model, bit for bit (the
  // same buckets, the same ring order, Adam's variance never frozen).
  auto all_dense = setup;
  all_dense.compress.warmup = setup.steps;
  auto dense = setup;
  dense.compress.mode = compress_mode::none;
  const auto warm = scheduler::run_topology(*env.sys, all_dense, data);
  const auto ring = scheduler::run_topology(*env.sys, dense, data);
  for (const auto& rep : warm.reports)
    REQUIRE(rep.error.empty());
  CHECK(warm.params == ring.params);
  // Half the steps dense, then top-k with Adam's variance frozen: the
  // same bits whatever order the payloads arrive in, and not the run
  // compressed from the start.
  auto half = setup;
  half.compress.warmup = setup.steps / 2;
  half.opt.freeze_variance_after = half.compress.warmup;
  const auto first = scheduler::run_topology(*env.sys, half, data);
  half.worker_delay_ms = {0.0, 3.0, 0.0};
  const auto late = scheduler::run_topology(*env.sys, half, data);
  const auto from_start = scheduler::run_topology(*env.sys, setup, data);
  CHECK(first.replica_spread == 0.0);
  CHECK(late.params == first.params);
  CHECK_FALSE(first.params == from_start.params);
  CHECK_FALSE(first.params == ring.params);
}

TEST_CASE("1-bit Adam on the ring: momentum sent whole is the frozen-variance gradient run to rounding, and any order gives the same bits") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 33);
  auto setup = compressed_setup(compress_mode::topk, 1.0); // every value sent: error feedback holds nothing
  setup.opt.kind = "adamw";
  setup.opt.lr = 2e-3f;
  setup.compress.warmup = setup.steps / 3;
  setup.opt.freeze_variance_after = setup.compress.warmup;
  const auto grads = scheduler::run_topology(*env.sys, setup, data);
  setup.compress.momentum = true;
  const auto moms = scheduler::run_topology(*env.sys, setup, data);
  for (const auto* out : {&grads, &moms})
    for (const auto& rep : out->reports)
      REQUIRE(rep.error.empty());
  // The mean of the workers' momenta is the momentum of the mean gradient
  // in exact arithmetic; in floats a different order of the same sums.
  CHECK_FALSE(moms.params == grads.params);
  gwtest::check_close(moms.params, grads.params, 1e-4, 1e-5);
  // Top-k 5% of the momentum: the same bits whatever order the payloads come in.
  setup.compress.ratio = 0.05;
  same_bits_when_late(env, setup, data, 0);
}

TEST_CASE("compressed ring sending each worker's own optimizer step: SGD's is the dense ring's to rounding, and Adam's repeats bit for bit in any order") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 35);
  auto setup = compressed_setup(compress_mode::topk, 1.0); // every value sent: error feedback holds nothing
  setup.compress.update = true;
  // SGD with momentum is linear in the gradient: the mean of the workers'
  // own steps is the step of the mean gradient, in another order of adds.
  const auto sgd = scheduler::run_topology(*env.sys, setup, data);
  for (const auto& rep : sgd.reports)
    REQUIRE(rep.error.empty());
  gwtest::check_close(sgd.params, joint_batch_reference(setup, data), 1e-4, 1e-5);
  // AdamW: each worker's state is its own; top-k 5% of its steps.
  setup.opt.kind = "adamw";
  setup.opt.lr = 2e-3f;
  setup.compress.ratio = 0.05;
  const auto first = same_bits_when_late(env, setup, data, 1);
  setup.compress.update = false; // the gradient compressed instead: another run
  CHECK_FALSE(scheduler::run_topology(*env.sys, setup, data).params == first.params);
}
