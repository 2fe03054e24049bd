// The GPT as a whole: its gradient against finite differences, its text
// data, and the gradient rules it trains with (AdamW's decay ranges,
// clipping, accumulation), and the configs that must be refused.
#include "kernels/error.hpp"
#include "models/layers/gpt.hpp"
#include "models/network.hpp"
#include "models/model.hpp"
#include "models/trainer.hpp"
#include "models/objective.hpp"
#include "reference.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>

using namespace gradwire;
using namespace gradwire::models;
using gwtest::objective;
using gwtest::random_tokens;
using gwtest::random_vec;

namespace {

model_spec tiny_gpt(int context = 5, int vocab = 7) {
  model_spec s;
  s.kind = "gpt";
  s.layers = 2, s.heads = 2, s.d_model = 8, s.context = context, s.vocab = vocab;
  s.channels = s.height = 1, s.width = context, s.classes = vocab;
  return s;
}

void write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

} // namespace

namespace {

/// Central differences against backward for three elements of every
/// parameter tensor, with dropout `dropout` (its masks fixed by one key).
void check_gpt_gradients(float dropout) {
  INFO("dropout " << dropout);
  auto spec = tiny_gpt();
  spec.dropout = dropout;
  model m(spec, kernels::device::cpu(), 3);
  // Weights of order 1, not GPT-2's 0.02: with a residual stream that
  // small, a finite step of 1e-2 moves LayerNorm's statistics as much as
  // the signal does, and the central difference stops being a derivative.
  const auto w0 = random_vec(m.size(), 6, -0.5f, 0.5f);
  std::copy(w0.begin(), w0.end(), m.params().data());
  auto rep = m.make_replica(true);
  rep->net.set_dropout_stream(12345, 3);
  const int n = 2;
  const auto x = tensor::from(random_tokens(static_cast<std::size_t>(n) * spec.context, spec.vocab, 4), {n, 1, 1, spec.context});
  const auto rows = n * spec.context;
  const auto r = random_vec(static_cast<std::size_t>(rows * spec.vocab), 5);
  objective(rep->net, x, r);
  rep->net.backward(tensor::from(r, {rows, spec.vocab}), false);
  const auto grads = rep->grads.to_vector();
  float* w = m.params().data();
  const double delta = 1e-2;
  int checked = 0;
  for (std::size_t p = 0; p < m.param_specs().size(); ++p) {
    const auto& ps = m.param_specs()[p];
    const auto count = static_cast<std::size_t>(kernels::numel(ps.shape));
    for (std::size_t k : {std::size_t{0}, count / 2, count - 1}) {
      const std::size_t at = m.param_offsets()[p] + k;
      const float held = w[at];
      w[at] = held + static_cast<float>(delta);
      const double up = objective(rep->net, x, r);
      w[at] = held - static_cast<float>(delta);
      const double down = objective(rep->net, x, r);
      w[at] = held;
      const double numeric = (up - down) / (2 * delta);
      INFO(ps.name << "[" << k << "]: analytic " << grads[at] << ", numeric " << numeric);
      CHECK(std::abs(grads[at] - numeric) <= 2e-3 + 2e-2 * std::abs(numeric));
      ++checked;
    }
  }
  CHECK(checked == 3 * static_cast<int>(m.param_specs().size()));
}

} // namespace

TEST_CASE("GPT gradients match central differences in every kind of parameter, with and without dropout", "[gpt]") {
  check_gpt_gradients(0.f);
  check_gpt_gradients(0.3f);
}

TEST_CASE("GPT dropout: each sample's mask whatever the split, new masks each step, none in evaluation", "[gpt]") {
  auto spec = tiny_gpt();
  spec.dropout = 0.25f;
  const int n = 6;
  const auto x = random_tokens(static_cast<std::size_t>(n) * spec.context, spec.vocab, 9);
  std::vector<std::int32_t> y(x.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<std::int32_t>(x[(i + 1) % x.size()]);
  auto grads_with = [&](float p, int accumulate, int threads, std::uint64_t key) {
    auto s = spec;
    s.dropout = p;
    model m(s, kernels::device::cpu(), 2);
    optimizer_spec o;
    o.accumulate = accumulate;
    trainer t(m, o, threads, parallelism::batch);
    t.set_dropout_key(key);
    t.compute_gradients(x.data(), y.data(), n);
    return t.gradients().to_vector();
  };
  const auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    return worst;
  };
  const auto whole = grads_with(0.25f, 1, 1, 4);
  CHECK(max_diff(grads_with(0.25f, 3, 1, 4), whole) < 1e-6); // micro-batches of 2 samples
  CHECK(max_diff(grads_with(0.25f, 1, 3, 4), whole) < 1e-6); // 3 replicas of 2 samples
  CHECK(max_diff(grads_with(0.25f, 1, 1, 5), whole) > 1e-3); // another step's masks
  CHECK(max_diff(grads_with(0.f, 1, 1, 4), whole) > 1e-3);   // dropout does something
  // Evaluation keeps every value: the logits of the model without dropout.
  model with(spec, kernels::device::cpu(), 2), without(tiny_gpt(), kernels::device::cpu(), 2);
  auto rw = with.make_replica(true), ro = without.make_replica(true);
  rw->net.set_dropout_stream(4, 0);
  const auto xt = tensor::from(x, {n, 1, 1, spec.context});
  const auto plain = ro->net.forward(xt, false).to_vector();
  CHECK(rw->net.forward(xt, false).to_vector() == plain);
  CHECK(rw->net.forward(xt, true).to_vector() != plain);
}

TEST_CASE("A GPT's own blocks look at a stop flag between them in training, and evaluation runs to its end", "[gpt]") {
  // The layer alone (the network looks before each of its layers, and a
  // GPT is one): its forward stops at the first block, its backward too.
  const auto spec = tiny_gpt();
  model m(spec, kernels::device::cpu(), 3);
  const auto lay = layout_of(spec);
  auto own = std::make_unique<gpt>(gpt_shape{spec.layers, spec.heads, spec.d_model, spec.context, spec.vocab, 0.f});
  gpt* g = own.get();
  std::vector<std::unique_ptr<layer>> layers;
  layers.push_back(std::move(own));
  network net(std::move(layers));
  auto grads = tensor::zeros(m.params().shape(), m.params().dev());
  const std::vector<param_spec> no_state; // the binder keeps references: no temporaries
  const std::vector<std::size_t> no_offsets;
  param_binder b(lay.specs, lay.offsets, no_state, no_offsets, m.params(), grads, tensor{}, true);
  net.bind(b);
  const int n = 2;
  const auto x = tensor::from(random_tokens(static_cast<std::size_t>(n) * spec.context, spec.vocab, 4), {n, 1, 1, spec.context});
  std::atomic<bool> stop{true};
  g->abort_on(&stop);
  CHECK_THROWS_AS(g->forward(x, true), step_aborted);
  const auto logits = g->forward(x, false).to_vector(); // an evaluation is never stopped
  stop = false;
  CHECK(g->forward(x, true).to_vector() == logits); // no dropout: training's logits are evaluation's
  stop = true;
  const auto dlogits = tensor::from(random_vec(logits.size(), 5), {static_cast<std::int64_t>(n) * spec.context, spec.vocab});
  CHECK_THROWS_AS(g->backward(dlogits, false), step_aborted);
  g->abort_on(nullptr);
  CHECK_NOTHROW(g->backward(dlogits, false));
}

TEST_CASE("GPT parameters carry nanoGPT's names and shapes, GPT-2's init, and decay only on weight matrices",
          "[gpt]") {
  model m(tiny_gpt(), kernels::device::cpu(), 1);
  const auto& specs = m.param_specs();
  REQUIRE(specs.front().name == "transformer.wte.weight");
  REQUIRE(specs.back().name == "transformer.ln_f.bias");
  int decayed = 0;
  for (const auto& s : specs) {
    if (s.name == "transformer.h.1.attn.c_attn.weight")
      CHECK(s.shape == shape_t{24, 8});
    if (s.name.find("c_proj.weight") != std::string::npos)
      CHECK(s.stddev == Approx(0.02f / 2.f)); // 1 / sqrt(2 layers)
    decayed += s.decay;
    CHECK(s.decay == (s.name.find(".attn.c_") != std::string::npos || s.name.find(".mlp.c_") != std::string::npos) *
                       (s.name.find(".weight") != std::string::npos));
  }
  CHECK(decayed == 8); // 4 matrices per block
  CHECK(m.parameter_count() == 7 * 8 + 5 * 8 + 2 * (4 * 8 + 8 * 24 + 24 + 8 * 8 + 8 + 8 * 32 + 32 + 32 * 8 + 8) + 16);
  CHECK_THROWS_WITH(gpt(gpt_shape{2, 3, 8, 5, 7}), Catch::Contains("model.heads = 3 does not divide model.d_model = 8"));
}

TEST_CASE("AdamW decays the given ranges only, in a shard's own indices too", "[gpt]") {
  optimizer_spec o;
  o.kind = "adamw";
  o.lr = 0.1f, o.weight_decay = 0.5f;
  o.decay = {{2, 5}, {8, 10}};
  std::vector<float> w(12, 1.f), g(12, 0.f); // no gradient: only the decay moves w
  optimizer opt(o, w.size(), kernels::device::cpu());
  opt.begin_step();
  opt.update(w.data(), g.data(), 0, w.size());
  for (std::size_t i = 0; i < w.size(); ++i)
    CHECK(w[i] == ((i >= 2 && i < 5) || (i >= 8 && i < 10) ? 0.95f : 1.f));
  o.offset = 4; // a shard of [4, 12): its element 0 is the buffer's 4
  std::vector<float> s(8, 1.f), sg(8, 0.f);
  optimizer shard(o, s.size(), kernels::device::cpu());
  shard.begin_step();
  shard.update(s.data(), sg.data(), 0, s.size());
  CHECK(s == std::vector<float>{0.95f, 1.f, 1.f, 1.f, 0.95f, 0.95f, 1.f, 1.f});
}

TEST_CASE("Accumulated micro-batches give the whole batch's gradient, and clipping bounds its norm", "[gpt]") {
  const auto spec = tiny_gpt();
  const int n = 6;
  const auto x = random_tokens(static_cast<std::size_t>(n) * spec.context, spec.vocab, 8);
  std::vector<std::int32_t> y(x.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<std::int32_t>(x[(i + 1) % x.size()]);
  auto grads_with = [&](int accumulate, float clip) {
    model m(spec, kernels::device::cpu(), 2);
    optimizer_spec o;
    o.accumulate = accumulate, o.clip_norm = clip;
    trainer t(m, o, 1);
    const auto r = t.compute_gradients(x.data(), y.data(), n);
    return std::make_pair(t.gradients().to_vector(), r);
  };
  const auto [whole, r1] = grads_with(1, 0.f);
  const auto [parts, r3] = grads_with(3, 0.f);
  CHECK(r3.loss_sum == Approx(r1.loss_sum).epsilon(1e-6));
  double ss = 0, worst = 0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    ss += static_cast<double>(whole[i]) * whole[i];
    worst = std::max(worst, std::abs(static_cast<double>(parts[i]) - whole[i]));
  }
  const double norm = std::sqrt(ss);
  CHECK(worst <= 1e-6 * std::max(1.0, norm));
  const auto [clipped, rc] = grads_with(1, static_cast<float>(norm / 4));
  CHECK(rc.grad_norm == Approx(norm).epsilon(1e-6));
  double css = 0;
  for (float v : clipped)
    css += static_cast<double>(v) * v;
  CHECK(std::sqrt(css) == Approx(norm / 4).epsilon(1e-5));
  const auto [kept, rk] = grads_with(1, static_cast<float>(norm * 2)); // below the bound: untouched
  CHECK(kept == whole);
}

TEST_CASE("Text data: windows and their next bytes, separators dropped, binary files skipped", "[gpt]") {
  const auto root = std::filesystem::path(gwtest::fresh_dir("text-windows", true));
  write(root / "a.txt", "abcdefghij\n%\nklmnopqrst\n%\n");
  write(root / "b.dat", std::string("bin\0ary", 7));
  std::filesystem::create_symlink(root / "a.txt", root / "a.u8");
  const auto t = load_text(root.string(), 4, 0.25, 1);
  CHECK(t.files == 1);
  CHECK(t.bytes == 22); // "%\n" lines dropped
  REQUIRE(t.train.label_width == 4);
  const std::string text = "abcdefghij\nklmnopqrst\n";
  for (std::int64_t i = 0; i < t.train.size(); ++i) {
    const float* in = t.train.image(i);
    const auto at = text.find(static_cast<char>(in[0]));
    for (int j = 0; j < 4; ++j) {
      CHECK(in[j] == static_cast<unsigned char>(text[at + j]));
      CHECK(t.train.label(i)[j] == static_cast<unsigned char>(text[at + j + 1]));
    }
    CHECK(at + 5 <= text.size() - 5); // training windows stay out of the last quarter
  }
  REQUIRE(t.test.size() == 1);
  CHECK(t.test.image(0)[0] == static_cast<unsigned char>(text[17]));
}

TEST_CASE("Text data refuses a missing path, no text, and a corpus shorter than a window", "[gpt]") {
  const auto root = std::filesystem::path(gwtest::fresh_dir("text-refused", true));
  CHECK_THROWS_WITH(load_text((root / "nope").string(), 8, 0.1, 1), Catch::Contains("does not exist"));
  write(root / "short.txt", "just a few words here");
  CHECK_THROWS_WITH(load_text((root / "short.txt").string(), 16, 0.1, 1),
                    Catch::Contains("21 bytes") && Catch::Contains("model.context + 1 = 17"));
  std::filesystem::create_directory(root / "empty");
  CHECK_THROWS_WITH(load_text((root / "empty").string(), 8, 0.1, 1), Catch::Contains("nothing to train on"));
}
