// Compressed gossip (compression.kind on D-PSGD) as CAF actors in one
// process: CHOCO-SGD sending everything at gamma 1 is D-PSGD to rounding;
// every mode repeats bit for bit whatever order the neighbours' payloads
// arrive in, and counts the payload formula's bytes; CHOCO's replicas
// stay together where naive compressed gossip's drift apart.
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "reference.hpp"
#include "topology_support.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"

#include <catch2/catch.hpp>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;

namespace {

scheduler::topology_setup gossip_setup(int workers, const std::string& graph, compress_mode mode, double ratio) {
  auto setup = small_setup(workers, 1, true);
  setup.family = &scheduler::gossip_family;
  setup.gossip.graph = graph;
  setup.compress.mode = mode;
  setup.compress.ratio = ratio;
  setup.steps = 12;
  return setup;
}

} // namespace

TEST_CASE("CHOCO gossip sending every value at gamma 1 is D-PSGD, to rounding") {
  // x^_j catches up with x_j exactly but for rounding, and then
  // x_i + sum_j w_ij (x^_j - x^_i) is D-PSGD's weighted mean.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 41);
  auto dense = gossip_setup(4, "ring", compress_mode::none, 1.0);
  dense.distinct_init = true;
  dense.steps = 40;
  auto all = dense;
  all.compress.mode = compress_mode::topk;
  all.gossip.consensus_lr = 1.f;
  const auto a = scheduler::run_topology(*env.sys, dense, data);
  const auto b = scheduler::run_topology(*env.sys, all, data);
  CHECK(a.params != b.params); // not the same code path
  gwtest::check_close(b.params, a.params, 1e-4, 1e-5);
  CHECK(std::abs(b.replica_spread - a.replica_spread) < 1e-3 * a.replica_spread + 1e-6);
}

TEST_CASE("compressed gossip: every mode and rule repeats bit for bit at 4 workers, payloads in any order") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 42);
  const auto n = model(gossip_setup(4, "complete", compress_mode::none, 1.0).spec, kernels::device::cpu(), 11).size();
  for (auto rule : {gossip_rule::choco, gossip_rule::naive})
    for (auto mode : {compress_mode::bf16, compress_mode::topk, compress_mode::randk, compress_mode::sign}) {
      INFO((rule == gossip_rule::choco ? "CHOCO, " : "naive, ") << compress_name(mode));
      auto setup = gossip_setup(4, "complete", mode, 0.05);
      setup.gossip.rule = rule;
      std::vector<std::vector<float>> models;
      for (int slow = -1; slow < setup.workers; ++slow) {
        setup.worker_delay_ms.assign(4, 0.0);
        if (slow >= 0) // its payloads arrive last
          setup.worker_delay_ms[static_cast<std::size_t>(slow)] = 3.0;
        const auto out = scheduler::run_topology(*env.sys, setup, data);
        for (const auto& rep : out.reports) {
          CHECK(rep.error.empty());
          CHECK(rep.steps == setup.steps);
          // Three neighbours a step, each sent the one payload.
          CHECK(rep.bytes_sent == setup.steps * 3 * 4 * static_cast<std::int64_t>(payload_words(setup.compress, n)));
          CHECK(rep.bytes_received == rep.bytes_sent);
        }
        models.push_back(out.params);
      }
      for (std::size_t k = 1; k < models.size(); ++k) {
        INFO("worker " << k - 1 << " slowed");
        CHECK(models[k] == models[0]);
      }
    }
}

TEST_CASE("compressed gossip: CHOCO's replicas reach consensus where naive compressed gossip's stall") {
  // Pure averaging (lr 0) of replicas from different starts, top-k: CHOCO's
  // estimates carry what compression dropped into later steps, so its
  // replicas reach consensus on their mean as dense D-PSGD's do, more
  // slowly; mixing compressed parameters stalls. The consensus step is the
  // automatic one.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 43);
  auto setup = gossip_setup(4, "ring", compress_mode::topk, 0.1);
  setup.distinct_init = true;
  setup.opt.lr = 0.f;
  setup.opt.momentum = 0.f;
  double choco_at_50 = 0, naive_at_50 = 0;
  for (int steps : {50, 150}) {
    setup.steps = steps;
    setup.gossip.rule = gossip_rule::choco;
    const auto choco = scheduler::run_topology(*env.sys, setup, data);
    setup.gossip.rule = gossip_rule::naive;
    const auto naive = scheduler::run_topology(*env.sys, setup, data);
    INFO(steps << " steps: replica spread CHOCO " << choco.replica_spread << ", naive " << naive.replica_spread);
    if (steps == 50) {
      choco_at_50 = choco.replica_spread;
      naive_at_50 = naive.replica_spread;
      CHECK(choco.replica_spread < 0.1 * naive.replica_spread);
      continue;
    }
    CHECK(choco.replica_spread < 1e-3 * choco_at_50); // still shrinking, geometrically
    CHECK(naive.replica_spread > 0.5 * naive_at_50);  // stalled
  }
}
