// Writes what tests/models/gpt_parity.py replays in PyTorch: a small GPT's
// initial weights (model.safetensors, nanoGPT's names), the batches of 20
// AdamW steps with clipping, gradwire's loss at each step, and the trained
// model's logits on a validation batch. Usage: gpt_parity_dump DIR
#include "kernels/error.hpp"
#include "models/batcher.hpp"
#include "models/trainer.hpp"
#include "scheduler/app/model_file.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <random>

using namespace gradwire;

namespace {

constexpr int batch = 4, steps = 20;

void write_bytes(const std::string& path, const void* p, std::size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  check(out.good(), "cannot write " + path);
}

std::string model_bytes(const models::model& m) {
  const auto p = m.params().to_vector();
  const auto s = m.state().to_vector();
  return scheduler::safetensors_of(m, p.data(), s.data(), {});
}

/// The GPT of the comparison: 2 layers, 2 heads, d_model 32, context 24 (not a tile multiple).
models::model_spec parity_spec() {
  models::model_spec spec;
  spec.kind = "gpt";
  spec.layers = 2, spec.heads = 2, spec.d_model = 32, spec.context = 24, spec.vocab = 256;
  spec.channels = spec.height = 1, spec.width = spec.context, spec.classes = spec.vocab;
  return spec;
}

models::optimizer_spec parity_adamw(const models::model_spec& spec) {
  models::optimizer_spec opt;
  opt.kind = "adamw";
  opt.lr = 3e-3f, opt.beta1 = 0.9f, opt.beta2 = 0.95f, opt.eps = 1e-8f, opt.weight_decay = 0.1f;
  opt.clip_norm = 0.5f;
  const auto layout = models::layout_of(spec);
  opt.decay = models::decay_ranges(layout.specs, layout.offsets);
  return opt;
}

/// English-like bytes (words of letters between spaces) as text splits.
models::text_splits parity_text(const std::string& dir, int context) {
  std::mt19937_64 rng(9);
  std::string text;
  while (text.size() < 4000)
    text += std::string(1 + rng() % 7, static_cast<char>('a' + rng() % 26)) + (rng() % 9 == 0 ? ".\n" : " ");
  const std::string path = dir + "/corpus.txt";
  write_bytes(path, text.data(), text.size());
  return models::load_text(path, context, 0.2, 3);
}

/// Trains `steps` steps, recording each batch, loss and gradient norm.
void train_and_record(models::trainer& t, const models::dataset& train, nlohmann::json& out,
                      const std::string& dir) {
  models::batcher b(train, models::shard_indices(train.size(), 0, 1, 3), batch, 3);
  std::vector<std::int32_t> xs, ys;
  models::batch bt;
  for (int s = 0; s < steps; ++s) {
    b.next(bt);
    for (float v : bt.x)
      xs.push_back(static_cast<std::int32_t>(v));
    ys.insert(ys.end(), bt.y.begin(), bt.y.end());
    const auto r = t.step(bt.x.data(), bt.y.data(), bt.size);
    out["losses"].push_back(r.mean_loss());
    out["grad_norms"].push_back(r.grad_norm);
  }
  write_bytes(dir + "/x.bin", xs.data(), xs.size() * 4);
  write_bytes(dir + "/y.bin", ys.data(), ys.size() * 4);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: gpt_parity_dump DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  const auto spec = parity_spec();
  models::model m(spec, kernels::device::cpu(), 5);
  const auto init = model_bytes(m);
  write_bytes(dir + "/init.safetensors", init.data(), init.size());
  const auto opt = parity_adamw(spec);
  models::trainer t(m, opt, 1);
  const auto splits = parity_text(dir, spec.context);
  nlohmann::json out = {{"layers", spec.layers}, {"heads", spec.heads}, {"d_model", spec.d_model},
                        {"context", spec.context}, {"vocab", spec.vocab}, {"batch", batch},
                        {"lr", opt.lr}, {"betas", {opt.beta1, opt.beta2}}, {"eps", opt.eps},
                        {"weight_decay", opt.weight_decay}, {"clip_norm", opt.clip_norm}};
  train_and_record(t, splits.train, out, dir);
  // The trained model's logits on the first validation windows.
  const auto& val = splits.test;
  auto rep = m.make_replica(true);
  const auto xv = kernels::tensor::from(std::vector<float>(val.image(0), val.image(0) + batch * spec.context),
                                        {batch, 1, 1, spec.context});
  const auto logits = rep->net.forward(xv, false).to_vector();
  write_bytes(dir + "/val_x.bin", val.image(0), static_cast<std::size_t>(batch * spec.context) * 4);
  write_bytes(dir + "/val_logits.bin", logits.data(), logits.size() * 4);
  std::ofstream(dir + "/run.json") << out.dump(1) << "\n";
  return 0;
}
