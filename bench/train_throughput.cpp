// gradwire-bench-train: training throughput of one worker, for the
// side-by-side comparison with PyTorch in bench/train_vs_torch.sh.
//
//   gradwire-bench-train --model mlp --threads 1 --batch 64 --steps 2000
//   gradwire-bench-train --sgemm --threads 2      (the GEMM limit: the best library's sgemm GFLOP/s)
//   gradwire-bench-train --model resnet20 --ab-layouts 8 --steps 10
//       (activations in channel blocks against NCHW, in one process: rounds
//        of `steps` steps each, alternating which goes first; medians)
//
// Prints one line: key=value pairs (samples_per_sec, step_ms, ...).
#include "kernels/backend.hpp"
#include "kernels/cpu/onednn_gemm.hpp"
#include "kernels/log.hpp"
#include "models/batcher.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/network.hpp"
#include "models/trainer.hpp"

#include <CLI/CLI.hpp>
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

namespace gm = gradwire::models;
using clk = std::chrono::steady_clock;

namespace {

/// One library's sgemm GFLOP/s on n^3 (best of 5 timed runs after one
/// untimed): `call` computes C = A B for rows [r0, r1) of C.
template <class Call>
double gflops_of(int threads, int n, Call call) {
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a), c(a);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    const int iters = 5;
    auto t0 = clk::now();
    if (threads <= 1) {
      for (int i = 0; i < iters; ++i)
        call(a.data(), b.data(), c.data(), 0, n);
    } else { // row blocks on threads of their own, as gradwire's parallel_gemm splits
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          for (int i = 0; i < iters; ++i)
            call(a.data(), b.data(), c.data(), n * t / threads, n * (t + 1) / threads);
        });
      for (auto& th : ts)
        th.join();
    }
    double s = std::chrono::duration<double>(clk::now() - t0).count();
    if (rep > 0)
      best = std::max(best, 2.0 * n * n * n * iters / s / 1e9);
  }
  return best;
}

struct gemm_limit {
  double openblas = 0, onednn = 0; ///< GFLOP/s; 0: library missing
  double best() const { return std::max(openblas, onednn); }
  const char* library() const { return onednn > openblas ? "onednn" : "openblas"; }
};

/// The GEMM limit: sgemm GFLOP/s on n^3 at `threads` threads in each
/// library gradwire can call, OpenBLAS (its own threads) and oneDNN (row
/// blocks on threads, one OpenMP thread each), so that "% of sgemm" is
/// measured against the fastest GEMM this machine has, not one library's.
gemm_limit sgemm_gflops(int threads, int n) {
  gemm_limit g;
  openblas_set_num_threads(threads);
  g.openblas = gflops_of(1, n, [n](const float* a, const float* b, float* c, int, int) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
  });
  openblas_set_num_threads(1);
  std::atomic<bool> ok{true};
  g.onednn = gflops_of(threads, n, [n, &ok](const float* a, const float* b, float* c, int r0, int r1) {
    if (!gradwire::kernels::onednn_sgemm(false, false, r1 - r0, n, n, 1.f, a + static_cast<std::size_t>(r0) * n,
                                         n, b, n, 0.f, c + static_cast<std::size_t>(r0) * n, n))
      ok = false;
  });
  if (!ok)
    g.onednn = 0;
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// Blocked activations against NCHW in one process: two trainers on the
/// same data, timed in alternating rounds.
int ab_layouts(const gm::dataset& ds, const gm::model_spec& spec, gradwire::kernels::device dev,
               const gm::optimizer_spec& opt, int threads, const std::string& parallel, int batch, int steps,
               int warmup, int rounds) {
  struct side {
    std::unique_ptr<gm::model> m;
    std::unique_ptr<gm::trainer> tr;
    std::vector<double> rates;
  };
  side sides[2];
  for (int k = 0; k < 2; ++k) { // 0: blocked, 1: NCHW (networks are bound in the trainer)
    gm::set_blocked_activations(k == 0);
    sides[k].m = std::make_unique<gm::model>(spec, dev, 1);
    sides[k].tr = std::make_unique<gm::trainer>(*sides[k].m, opt, threads, gm::parse_parallelism(parallel));
  }
  gm::set_blocked_activations(true);
  gm::batcher b(ds, gm::shard_indices(ds.size(), 0, 1, 1), batch, 1);
  gm::batch bt;
  auto run = [&](side& sd, int n) {
    auto t0 = clk::now();
    for (int i = 0; i < n; ++i) {
      if (!b.next(bt) || bt.size != batch)
        b.next(bt);
      sd.tr->step(bt.x.data(), bt.y.data(), bt.size);
    }
    return static_cast<double>(n) * batch / std::chrono::duration<double>(clk::now() - t0).count();
  };
  for (auto& sd : sides)
    run(sd, std::max(1, warmup / 10));
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      auto& sd = sides[(r + k) % 2];
      sd.rates.push_back(run(sd, steps));
    }
  const double blocked = median(sides[0].rates), nchw = median(sides[1].rates);
  std::printf("model=%s threads=%d batch=%d rounds=%d blocked_samples_per_sec=%.0f nchw_samples_per_sec=%.0f "
              "ratio=%.3f block=%d\n",
              spec.kind.c_str(), threads, batch, rounds, blocked, nchw, blocked / nchw,
              gradwire::kernels::backend_for(dev).activation_block());
  return 0;
}

/// The data a model trains on here: windows of fortunes for the GPT,
/// synthetic CIFAR-shaped images for ResNets, else Fashion-MNIST (or synthetic).
gm::dataset bench_data(const std::string& model_kind, const std::string& data, int context) {
  if (model_kind == "gpt")
    return gm::load_text(gm::fortunes_default_dir, context, 0.1, 1).train;
  const bool cifar = model_kind.rfind("resnet", 0) == 0;
  if (data == "synthetic" || cifar)
    return gm::make_synthetic(8192, cifar ? 3 : 1, cifar ? 32 : 28, cifar ? 32 : 28, 10, 1);
  return gm::load_mnist_dir(gm::fashion_mnist_default_dir, true, "fashion-mnist");
}

/// SGD lr 0.05 momentum 0.9; for the GPT AdamW with clipping, as
/// examples/lm.toml and bench/torch_gpt.py.
gm::optimizer_spec bench_optimizer(const gm::model_spec& spec) {
  gm::optimizer_spec opt;
  opt.lr = 0.05f;
  opt.momentum = 0.9f;
  if (spec.kind == "gpt") {
    opt.kind = "adamw", opt.lr = 3e-4f, opt.weight_decay = 0.1f, opt.beta2 = 0.95f, opt.clip_norm = 1.f;
    const auto l = gm::layout_of(spec);
    opt.decay = gm::decay_ranges(l.specs, l.offsets);
  }
  return opt;
}

/// Seconds for `steps` training steps of full batches after `warmup`
/// untimed ones, and the part of them spent gathering batches.
std::pair<double, double> time_steps(gm::trainer& tr, gm::batcher& b, int batch, int warmup, int steps,
                                     gradwire::kernels::device dev) {
  gm::batch bt;
  auto next = [&] {
    if (!b.next(bt, &tr.pool()) || bt.size != batch)
      b.next(bt, &tr.pool());
  };
  for (int i = 0; i < warmup; ++i) {
    next();
    tr.step(bt.x.data(), bt.y.data(), bt.size);
  }
  auto& be = gradwire::kernels::backend_for(dev);
  be.synchronize();
  be.reset_peak_bytes(); // the peak of the timed steps, as PyTorch's reset_peak_memory_stats
  double data_s = 0;
  auto t0 = clk::now();
  for (int i = 0; i < steps; ++i) {
    auto d0 = clk::now();
    next();
    data_s += std::chrono::duration<double>(clk::now() - d0).count();
    tr.step(bt.x.data(), bt.y.data(), bt.size);
  }
  be.synchronize();
  return {std::chrono::duration<double>(clk::now() - t0).count(), data_s};
}

} // namespace

namespace {

int bench_main(int argc, char** argv) {
  CLI::App app{"gradwire training-throughput benchmark"};
  std::string model_kind = "mlp", data = "fashion-mnist", device = "cpu", parallel = "auto", precision = "fp32";
  int threads = 1, batch = 64, steps = 2000, warmup = 200, sgemm_n = 512, ab_rounds = 0;
  bool sgemm = false;
  app.add_option("--model", model_kind, "mlp | lenet5 | resnet20 | gpt");
  gm::model_spec gpt;
  app.add_option("--layers", gpt.layers, "gpt: blocks");
  app.add_option("--heads", gpt.heads, "gpt: attention heads");
  app.add_option("--d-model", gpt.d_model, "gpt: residual width");
  app.add_option("--context", gpt.context, "gpt: tokens per sequence (windows of the fortunes corpus)");
  app.add_option("--threads", threads, "worker threads");
  app.add_option("--parallelism", parallel, "auto | batch | layer");
  app.add_option("--batch", batch, "batch size");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--data", data, "fashion-mnist | synthetic");
  app.add_option("--device", device, "cpu | cuda:N");
  app.add_option("--precision", precision, "fp32 | bf16 (what the GEMMs and attention compute in; bf16 on a GPU)")
    ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_flag("--sgemm", sgemm, "measure sgemm GFLOP/s in OpenBLAS and oneDNN instead (the GEMM limit: the better)");
  app.add_option("--sgemm-n", sgemm_n, "sgemm size");
  app.add_option("--ab-layouts", ab_rounds, "rounds of blocked activations against NCHW (medians, ratio)");
  CLI11_PARSE(app, argc, argv);

  gradwire::kernels::backend_for(gradwire::kernels::device::cpu()); // sets OpenBLAS to 1 thread
  if (sgemm) {
    const gemm_limit g = sgemm_gflops(threads, sgemm_n);
    std::printf("sgemm_gflops=%.1f library=%s openblas_gflops=%.1f onednn_gflops=%.1f threads=%d n=%d\n",
                g.best(), g.library(), g.openblas, g.onednn, threads, sgemm_n);
    return 0;
  }
  const bool lm = model_kind == "gpt";
  const gm::dataset ds = bench_data(model_kind, data, gpt.context);
  gm::model_spec spec = gpt;
  spec.kind = model_kind;
  spec.channels = ds.channels;
  spec.height = ds.height;
  spec.width = ds.width;
  spec.classes = lm ? gpt.vocab : ds.classes;
  const auto dev = gradwire::kernels::parse_device(device);
  gradwire::kernels::backend_for(dev).set_gemm_math(precision == "bf16" ? gradwire::kernels::gemm_math::bf16
                                                                         : gradwire::kernels::gemm_math::fp32);
  const gm::optimizer_spec opt = bench_optimizer(spec);
  if (ab_rounds > 0)
    return ab_layouts(ds, spec, dev, opt, threads, parallel, batch, steps, warmup, ab_rounds);
  gm::model m(spec, dev, 1);
  gm::trainer tr(m, opt, threads, gm::parse_parallelism(parallel));
  gm::batcher b(ds, gm::shard_indices(ds.size(), 0, 1, 1), batch, 1);
  const auto [s, data_s] = time_steps(tr, b, batch, warmup, steps, dev);
  const double flops = m.train_flops_per_sample();
  const double peak_mib = static_cast<double>(gradwire::kernels::backend_for(dev).peak_bytes()) / (1 << 20);
  std::printf("model=%s threads=%d parallelism=%s batch=%d device=%s precision=%s samples_per_sec=%.0f "
              "step_ms=%.4f data_ms=%.4f train_flops_per_sample=%.0f tokens_per_sec=%.0f peak_mib=%.0f\n",
              model_kind.c_str(), threads, tr.strategy() == gm::parallelism::layer ? "layer" : "batch",
              batch, device.c_str(), precision.c_str(),
              static_cast<double>(steps) * batch / s, s / steps * 1e3, data_s / steps * 1e3, flops,
              static_cast<double>(steps) * batch * (lm ? spec.context : 1) / s, peak_mib);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (const std::exception& e) { // a device that is not there, a corpus that is missing: said, no abort
    gradwire::log::error("gradwire-bench-train: {}", e.what());
    return 2;
  }
}
