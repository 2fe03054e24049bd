// The transformer's CUDA kernels against the CPU reference, pass by pass
// (contexts that are not a multiple of a tile included), then GPT training
// steps on cuda:0 against the same steps on the CPU. Part of test_cuda,
// whose main skips without a GPU.
#include "actor_env.hpp"
#include "cuda/device_buffers.hpp"
#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "models/trainer.hpp"
#include "reference.hpp"
#include "scheduler/runtime/ring_wiring.hpp"
#include "scheduler/runtime/topology.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

using namespace gradwire;
using namespace gradwire::kernels;
using gwtest::check_close;
using gwtest::dbuf;
using gwtest::cpu;
using gwtest::bf16_on_gpu;
using gwtest::gpu;
using gwtest::random_tokens;
using gwtest::random_vec;

namespace {

/// Attention forward and backward at one geometry, GPU against CPU, with
/// the probabilities dropped as `drop` says.
void check_attention(int batch, int time, int heads, int d, const attention_dropout& drop = {}) {
  INFO("attention batch " << batch << " time " << time << " heads " << heads << " d " << d << " dropout "
                          << drop.p);
  const auto rows = static_cast<std::size_t>(batch) * time, lse_n = rows * heads;
  const auto qkv = random_vec(rows * 3 * d, 11, -2.f, 2.f), dy = random_vec(rows * d, 12);
  std::vector<float> y(rows * d), lse(lse_n), dqkv(rows * 3 * d);
  cpu().attention_forward(qkv.data(), y.data(), lse.data(), batch, time, heads, d, drop);
  cpu().attention_backward(qkv.data(), y.data(), dy.data(), lse.data(), dqkv.data(), batch, time, heads, d, drop);
  dbuf gq(qkv), gy(rows * d), gl(lse_n), gdy(dy), gdq(rows * 3 * d);
  gpu().attention_forward(gq.p(), gy.p(), gl.p(), batch, time, heads, d, drop);
  gpu().attention_backward(gq.p(), gy.p(), gdy.p(), gl.p(), gdq.p(), batch, time, heads, d, drop);
  check_close(gy.host(), y, 1e-4, 1e-5);
  check_close(gl.host(), lse, 1e-5, 1e-5);
  check_close(gdq.host(), dqkv, 1e-3, 1e-4);
  // No atomics: the same inputs give the same bits.
  dbuf gdq2(rows * 3 * d);
  gpu().attention_backward(gq.p(), gy.p(), gdy.p(), gl.p(), gdq2.p(), batch, time, heads, d, drop);
  CHECK(gdq2.host() == gdq.host());
}

struct side_by_side {
  double worst = 0; ///< the largest relative difference of a step's loss
  std::vector<float> cpu_params, gpu_params;
};

/// Ten steps of AdamW with clipping on a small GPT, from the same start on
/// the same batches with the same dropout masks, on the CPU and on cuda:0
/// computing in `math`.
side_by_side train_cpu_and_gpu(gemm_math math, float dropout = 0.f) {
  models::model_spec spec;
  spec.kind = "gpt";
  spec.dropout = dropout;
  spec.layers = 2, spec.heads = 4, spec.d_model = 64, spec.context = 40, spec.vocab = 256;
  spec.channels = spec.height = 1, spec.width = spec.context, spec.classes = spec.vocab;
  models::optimizer_spec opt;
  opt.kind = "adamw", opt.lr = 1e-3f, opt.weight_decay = 0.1f, opt.clip_norm = 1.f;
  models::model mc(spec, device::cpu(), 1), mg(spec, device::cuda(0), 1);
  models::trainer tc(mc, opt, 1), tg(mg, opt, 1);
  std::optional<bf16_on_gpu> bf16;
  if (math == gemm_math::bf16)
    bf16.emplace();
  side_by_side r;
  const int n = 8;
  for (int step = 0; step < 10; ++step) {
    const auto x = random_tokens(static_cast<std::size_t>(n) * spec.context, 64, 100 + step);
    std::vector<std::int32_t> y(x.size());
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] = static_cast<std::int32_t>(x[(i + 1) % x.size()]);
    tc.set_dropout_key(models::dropout_key(7, 0, step));
    tg.set_dropout_key(models::dropout_key(7, 0, step));
    const double lc = tc.step(x.data(), y.data(), n).mean_loss();
    const double lg = tg.step(x.data(), y.data(), n).mean_loss();
    r.worst = std::max(r.worst, std::abs(lg - lc) / lc);
  }
  r.cpu_params = mc.params().to_vector();
  r.gpu_params = mg.params().to_vector();
  return r;
}

/// Attention on the Tensor Cores (bf16) against the CPU's fp32, on inputs
/// bf16 holds exactly: what differs is the rounding of P and dS to bf16.
void check_attention_bf16(int batch, int time, int heads, int d, const attention_dropout& drop = {}) {
  INFO("bf16 attention batch " << batch << " time " << time << " heads " << heads << " d " << d << " dropout "
                               << drop.p);
  const auto rows = static_cast<std::size_t>(batch) * time, lse_n = rows * heads;
  auto qkv = random_vec(rows * 3 * d, 13, -2.f, 2.f), dy = random_vec(rows * d, 14);
  gwtest::round_to_bf16(qkv);
  gwtest::round_to_bf16(dy);
  std::vector<float> y(rows * d), lse(lse_n), dqkv(rows * 3 * d);
  cpu().attention_forward(qkv.data(), y.data(), lse.data(), batch, time, heads, d, drop);
  cpu().attention_backward(qkv.data(), y.data(), dy.data(), lse.data(), dqkv.data(), batch, time, heads, d, drop);
  dbuf gq(qkv), gy(rows * d), gl(lse_n), gdy(dy), gdq(rows * 3 * d), gdq2(rows * 3 * d);
  const bf16_on_gpu bf16;
  gpu().attention_forward(gq.p(), gy.p(), gl.p(), batch, time, heads, d, drop);
  gpu().attention_backward(gq.p(), gy.p(), gdy.p(), gl.p(), gdq.p(), batch, time, heads, d, drop);
  gpu().attention_backward(gq.p(), gy.p(), gdy.p(), gl.p(), gdq2.p(), batch, time, heads, d, drop);
  const auto off = [](const std::vector<float>& got, const std::vector<float>& want) { // relative to the largest
    double diff = 0, top = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
      top = std::max(top, static_cast<double>(std::abs(want[i])));
    }
    return top > 0 ? diff / top : diff;
  };
  CHECK(off(gy.host(), y) < 5e-3);
  check_close(gl.host(), lse, 1e-5, 1e-5);
  CHECK(off(gdq.host(), dqkv) < 1e-2);
  CHECK(gdq2.host() == gdq.host()); // no atomics: the same bits again
}

} // namespace

TEST_CASE("cuda attention matches CPU, forward and backward, at any context and head size", "[gpt]") {
  check_attention(2, 37, 2, 32);   // head 16, one partial tile
  check_attention(1, 1, 1, 16);    // a single position
  check_attention(2, 100, 4, 128); // head 32, a full tile and a partial one
  check_attention(1, 130, 2, 128); // head 64, three tiles
  check_attention(1, 70, 1, 96);   // head 96, under the 128 bound
  check_attention(1, 65, 2, 256);  // head 128, tiles of 32
}

TEST_CASE("cuda bf16 attention on the Tensor Cores stays within bf16 rounding of the CPU", "[gpt]") {
  check_attention_bf16(2, 37, 2, 32);
  check_attention_bf16(1, 1, 1, 16);
  check_attention_bf16(2, 100, 4, 128);
  check_attention_bf16(1, 130, 2, 128);
  check_attention_bf16(1, 70, 1, 96);
  check_attention_bf16(1, 65, 2, 256);
  check_attention_bf16(2, 1024, 6, 384); // the benchmark's long context
}

TEST_CASE("cuda attention drops the probabilities the CPU drops, in fp32 and on the Tensor Cores", "[gpt]") {
  const attention_dropout drop{0.2f, 0xd20b0u, 5};
  check_attention(2, 37, 2, 32, drop);
  check_attention(1, 130, 2, 128, drop);
  check_attention(1, 65, 2, 256, drop);
  check_attention_bf16(2, 100, 4, 128, drop);
  check_attention_bf16(2, 1024, 6, 384, drop);
}

TEST_CASE("cuda attention refuses a head over 128 values, heads that do not divide d and a dropout of 1", "[gpt]") {
  dbuf q(3 * 256), y(256), l(1), dq(3 * 256);
  CHECK_THROWS_WITH(gpu().attention_forward(q.p(), y.p(), l.p(), 1, 1, 1, 256, {}), Catch::Contains("128"));
  CHECK_THROWS_WITH(gpu().attention_forward(q.p(), y.p(), l.p(), 1, 1, 3, 256, {}), Catch::Contains("divide"));
  CHECK_THROWS_WITH(gpu().attention_forward(q.p(), y.p(), l.p(), 1, 1, 2, 256, {1.f, 1, 0}),
                    Catch::Contains("dropout probability"));
}

TEST_CASE("cuda LayerNorm matches CPU, forward and backward, with dx over dy", "[gpt]") {
  for (int cols : {72, 256}) {
    const int rows = 37;
    const auto n = static_cast<std::size_t>(rows) * cols;
    const auto x = random_vec(n, 21, -3.f, 3.f), w = random_vec(cols, 22, 0.5f, 1.5f);
    const auto b = random_vec(cols, 23), dy = random_vec(n, 24);
    auto dw = random_vec(cols, 25), db = random_vec(cols, 26); // accumulated onto
    std::vector<float> y(n), mean(rows), rstd(rows), dx = dy;
    cpu().layernorm_forward(x.data(), y.data(), mean.data(), rstd.data(), w.data(), b.data(), rows, cols, 1e-5f);
    dbuf gx(x), gy(n), gm(rows), gr(rows), gw(w), gb(b), gdx(dy), gdw(dw), gdb(db);
    gpu().layernorm_forward(gx.p(), gy.p(), gm.p(), gr.p(), gw.p(), gb.p(), rows, cols, 1e-5f);
    check_close(gy.host(), y, 1e-5, 1e-5);
    check_close(gm.host(), mean, 1e-6, 1e-6);
    check_close(gr.host(), rstd, 1e-6, 1e-6);
    cpu().layernorm_backward(x.data(), dx.data(), mean.data(), rstd.data(), w.data(), dx.data(), dw.data(),
                             db.data(), rows, cols);
    gpu().layernorm_backward(gx.p(), gdx.p(), gm.p(), gr.p(), gw.p(), gdx.p(), gdw.p(), gdb.p(), rows, cols);
    check_close(gdx.host(), dx, 1e-4, 1e-5);
    check_close(gdw.host(), dw, 1e-4, 1e-5);
    check_close(gdb.host(), db, 1e-5, 1e-5);
  }
}

TEST_CASE("cuda dropout draws the CPU's mask bit for bit", "[gpt]") {
  const int rows = 300, cols = 96;
  const auto x = random_vec(static_cast<std::size_t>(rows) * cols, 15);
  auto want = x;
  cpu().dropout(want.data(), rows, cols, 0.1f, 77, 12);
  dbuf g(x);
  gpu().dropout(g.p(), rows, cols, 0.1f, 77, 12);
  CHECK(g.host() == want);
}

TEST_CASE("cuda GELU matches CPU, forward and backward", "[gpt]") {
  const std::size_t n = 5003;
  const auto x = random_vec(n, 31, -6.f, 6.f), dy = random_vec(n, 32);
  std::vector<float> y(n), dx(n);
  cpu().gelu_forward(x.data(), y.data(), n);
  cpu().gelu_backward(x.data(), dy.data(), dx.data(), n);
  dbuf gx(x), gy(n), gdy(dy);
  gpu().gelu_forward(gx.p(), gy.p(), n);
  gpu().gelu_backward(gx.p(), gdy.p(), gdy.p(), n); // dx over dy, as the GPT calls it
  check_close(gy.host(), y, 1e-5, 1e-6);
  check_close(gdy.host(), dx, 1e-5, 1e-6);
}

TEST_CASE("cuda embeddings gather and scatter as the CPU does, bit for bit, and refuse bad tokens", "[gpt]") {
  const int batch = 3, time = 50, d = 40, vocab = 256;
  const auto rows = static_cast<std::size_t>(batch) * time;
  const auto tok = random_tokens(rows, 20, 41); // few distinct tokens: each one at many positions
  const auto wte = random_vec(static_cast<std::size_t>(vocab) * d, 42), wpe = random_vec(time * d, 43);
  const auto dh = random_vec(rows * d, 44);
  auto dwte = random_vec(wte.size(), 45), dwpe = random_vec(wpe.size(), 46);
  std::vector<float> h(rows * d);
  dbuf gt(tok), gwte(wte), gwpe(wpe), gh(rows * d), gdh(dh), gdwte(dwte), gdwpe(dwpe);
  cpu().embedding_forward(tok.data(), wte.data(), wpe.data(), h.data(), batch, time, d, vocab);
  gpu().embedding_forward(gt.p(), gwte.p(), gwpe.p(), gh.p(), batch, time, d, vocab);
  CHECK(gh.host() == h);
  cpu().embedding_backward(tok.data(), dh.data(), dwte.data(), dwpe.data(), batch, time, d, vocab);
  gpu().embedding_backward(gt.p(), gdh.p(), gdwte.p(), gdwpe.p(), batch, time, d, vocab);
  CHECK(gdwte.host() == dwte); // the CPU's order of adds
  CHECK(gdwpe.host() == dwpe);
  auto bad = tok;
  bad[77] = 256.f;
  dbuf gbad(bad);
  CHECK_THROWS_WITH(gpu().embedding_forward(gbad.p(), gwte.p(), gwpe.p(), gh.p(), batch, time, d, vocab),
                    Catch::Contains("token 256") && Catch::Contains("position 77"));
}

TEST_CASE("GPT training with AdamW and clipping on cuda:0 follows the CPU run", "[gpt]") {
  const auto r = train_cpu_and_gpu(gemm_math::fp32);
  INFO("largest relative loss difference " << r.worst);
  CHECK(r.worst < 1e-4);
  check_close(r.gpu_params, r.cpu_params, 1e-3, 1e-4);
}

TEST_CASE("GPT training with dropout on cuda:0 draws the CPU's masks and follows the CPU run", "[gpt]") {
  const auto r = train_cpu_and_gpu(gemm_math::fp32, 0.2f);
  INFO("largest relative loss difference " << r.worst);
  CHECK(r.worst < 1e-4);
  check_close(r.gpu_params, r.cpu_params, 1e-3, 1e-4);
}

TEST_CASE("GPT training with bf16 GEMMs and attention on cuda:0 stays near the fp32 CPU run", "[gpt]") {
  const auto r = train_cpu_and_gpu(gemm_math::bf16);
  INFO("largest relative loss difference " << r.worst);
  CHECK(r.worst < 2e-2);
  check_close(r.gpu_params, r.cpu_params, 5e-2, 5e-3);
}

TEST_CASE("a GPT ring with one worker on cuda:0 follows the all-CPU ring", "[gpt]") {
  gwtest::actor_env env;
  const auto text = models::load_text(models::fortunes_default_dir, 32, 0.1, 1);
  scheduler::topology_setup setup;
  setup.family = &scheduler::ring_family;
  setup.spec.kind = "gpt";
  setup.spec.layers = 2, setup.spec.heads = 2, setup.spec.d_model = 64, setup.spec.context = 32;
  setup.spec.vocab = 256, setup.spec.classes = 256;
  setup.spec.channels = setup.spec.height = 1, setup.spec.width = 32;
  setup.opt.kind = "adamw", setup.opt.lr = 1e-3f, setup.opt.clip_norm = 1.f;
  setup.workers = 2;
  setup.batch_size = 8;
  setup.steps = 10;
  setup.timeout = std::chrono::milliseconds(60000);
  const auto cpu_only = scheduler::run_topology(*env.sys, setup, text.train);
  setup.worker_device = {device::cpu(), device::cuda(0)};
  const auto mixed = scheduler::run_topology(*env.sys, setup, text.train);
  for (const auto& rep : mixed.reports)
    REQUIRE(rep.error.empty());
  check_close(mixed.params, cpu_only.params, 1e-2, 1e-4);
  CHECK(mixed.replica_spread == 0.0);
}
