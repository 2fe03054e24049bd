// Compressed pushes to parameter-server shards (compression.kind on the
// parameter server, local SGD and DiLoCo) as CAF actors in one process:
// lock-step shards repeat bit for bit whatever order the pushes arrive in,
// a payload that keeps every value is the dense exchange to rounding, the
// counted bytes are the payload formula, and a malformed payload is
// refused naming its rank while the shard carries on.
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "reference.hpp"
#include "topology_support.hpp"
#include "scheduler/runtime/ps_wiring.hpp"

#include <catch2/catch.hpp>

#include <cstring>

using namespace gradwire;
using namespace gradwire::models;
using namespace gwtest;

namespace {

/// 3 workers, 2 shards; kind: the parameter server (sync or async), local
/// SGD or DiLoCo (both every 2 steps).
scheduler::topology_setup pushes_setup(const scheduler::topology_family* kind, compress_mode mode, double ratio) {
  auto setup = small_setup(3, 2, true); // sync: DiLoCo in lock step, not async DiLoCo
  setup.family = kind;
  setup.steps = 12;
  if (kind != &scheduler::parameter_server_family)
    setup.ps.local_steps = 2;
  if (kind == &scheduler::diloco_family) {
    setup.ps.outer = true;
    setup.ps.outer_lr = 0.7f;
    setup.ps.outer_momentum = 0.9f;
  }
  setup.compress.mode = mode;
  setup.compress.ratio = ratio;
  return setup;
}

const char* kind_name(const scheduler::topology_family* k) {
  return k == &scheduler::parameter_server_family ? "sync PS" : k == &scheduler::local_sgd_family ? "local SGD" : "DiLoCo";
}

/// What one worker pushes to every shard once: the shards' payloads' bytes.
std::int64_t push_bytes(const scheduler::topology_setup& setup) {
  const models::model m(setup.spec, kernels::device::cpu(), setup.seed);
  std::int64_t words = 0;
  for (const auto& [b, e] : scheduler::shard_ranges(m.size(), setup.ps.shards))
    words += static_cast<std::int64_t>(payload_words(setup.compress, e - b));
  return 4 * words;
}

} // namespace

TEST_CASE("compressed pushes: sync PS, local SGD and DiLoCo at 3 workers repeat bit for bit, pushes in any order") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 31);
  for (auto kind : {&scheduler::parameter_server_family, &scheduler::local_sgd_family, &scheduler::diloco_family})
    for (auto mode : {compress_mode::bf16, compress_mode::topk, compress_mode::randk, compress_mode::sign,
                      compress_mode::int8}) {
      INFO(kind_name(kind) << ", " << compress_name(mode));
      auto setup = pushes_setup(kind, mode, 0.05);
      std::vector<std::vector<float>> models;
      for (int slow = -1; slow < setup.workers; ++slow) {
        setup.worker_delay_ms.assign(static_cast<std::size_t>(setup.workers), 0.0);
        if (slow >= 0) // its pushes arrive last, round after round
          setup.worker_delay_ms[static_cast<std::size_t>(slow)] = 3.0;
        const auto out = scheduler::run_topology(*env.sys, setup, data);
        const std::int64_t pushes = kind == &scheduler::parameter_server_family ? setup.steps : setup.steps / 2;
        for (const auto& rep : out.reports) {
          CHECK(rep.error.empty());
          CHECK(rep.steps == setup.steps);
          CHECK(rep.bytes_sent == pushes * push_bytes(setup)); // the payloads, as models/compress.hpp counts them
          CHECK(rep.compressed_steps == pushes);                // and each push's compression error
        }
        models.push_back(out.params);
      }
      for (std::size_t k = 1; k < models.size(); ++k) {
        INFO("worker " << k - 1 << " slowed");
        CHECK(models[k] == models[0]);
      }
    }
}

TEST_CASE("compressed pushes keeping every value are the dense exchange, to rounding") {
  // Top-k at ratio 1 sends every value: the sync PS sums the gradients the
  // dense PS sums, and local SGD's shards apply the mean pseudo-gradient
  // w - mean(w - w_i), which is the dense average mean(w_i) to rounding.
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 32);
  for (auto kind : {&scheduler::parameter_server_family, &scheduler::local_sgd_family}) {
    INFO(kind_name(kind));
    auto dense = pushes_setup(kind, compress_mode::none, 0.01);
    auto all = pushes_setup(kind, compress_mode::topk, 1.0);
    const auto a = scheduler::run_topology(*env.sys, dense, data);
    const auto b = scheduler::run_topology(*env.sys, all, data);
    gwtest::check_close(b.params, a.params, 1e-4, 1e-5);
    if (kind == &scheduler::local_sgd_family)
      CHECK(a.params != b.params); // pseudo-gradients, not parameters: not the same code path
  }
}

TEST_CASE("compressed async pushes: every push applied, and error feedback changes the model") {
  actor_env env;
  auto data = make_synthetic(1024, 1, 28, 28, 10, 33);
  auto setup = small_setup(3, 2, false);
  setup.steps = 12;
  setup.compress.mode = compress_mode::topk;
  setup.compress.ratio = 0.05;
  const auto with_ef = scheduler::run_topology(*env.sys, setup, data);
  for (const auto& rep : with_ef.reports) {
    CHECK(rep.error.empty());
    CHECK(rep.steps == setup.steps);
    CHECK(rep.bytes_sent == setup.steps * push_bytes(setup));
    CHECK(rep.staleness.size() == static_cast<std::size_t>(setup.steps * setup.ps.shards)); // every push applied
  }
  setup.compress.error_feedback = false;
  setup.workers = 1; // one worker: the same schedule with and without, so only the residual differs
  auto one_ef = setup;
  one_ef.compress.error_feedback = true;
  CHECK(scheduler::run_topology(*env.sys, setup, data).params != scheduler::run_topology(*env.sys, one_ef, data).params);
}

TEST_CASE("a shard refuses a malformed compressed push naming the rank, and carries on") {
  actor_env env;
  auto sc = one_worker_shard(2, true);
  sc.compress.mode = compress_mode::topk;
  sc.compress.ratio = 0.25; // 16 of 64 values: 33 words
  auto shard = actors::spawn_ps_shard(*env.sys, sc, actors::slice::zeros({64}));
  caf::scoped_actor self{*env.sys};
  auto push = [&](actors::slice payload) {
    std::string error;
    self->request(shard, std::chrono::seconds(10), actors::push_atom::value, 0, std::int64_t{0}, std::int64_t{0},
                  std::int64_t{16}, std::move(payload))
      .receive([&](std::int64_t, std::int64_t) {}, [&](caf::error& e) { error = env.sys->render(e); });
    return error;
  };
  auto words = [](std::vector<std::uint32_t> w) {
    auto s = actors::slice::empty({static_cast<std::int64_t>(w.size())});
    std::memcpy(s.data(), w.data(), w.size() * sizeof(std::uint32_t));
    return s;
  };
  std::vector<std::uint32_t> bad(33, 0);
  bad[0] = 16;
  for (std::uint32_t i = 0; i < 16; ++i)
    bad[1 + i] = i;
  bad[16] = 640; // an index past the slice's 64
  CHECK_THAT(push(words(bad)), Catch::Contains("shard 2") && Catch::Contains("rank 0"));
  CHECK_THAT(push(actors::slice::zeros({64})), Catch::Contains("shard 2") && Catch::Contains("rank 0")); // dense: not a payload
  bad[16] = 15; // now well formed
  CHECK(push(words(bad)).empty());
  CHECK(fetched(self, shard).first == 1); // only the well-formed push was taken
  anon_send_exit(shard, caf::exit_reason::user_shutdown);
}
