#include "scheduler/app/sample.hpp"

#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/model_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace gradwire::scheduler {

namespace {

/// The byte to emit from one row of logits: greedy at temperature 0, else
/// drawn from softmax(logits / temperature) over the top_k likeliest bytes
/// (ties at the k-th logit kept, as nanoGPT's `logits < v[-1]` cut keeps them).
int pick(const float* logits, int vocab, const sample_options& o, std::mt19937_64& rng) {
  const int best = static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  if (o.temperature <= 0)
    return best;
  float cut = -std::numeric_limits<float>::infinity();
  if (o.top_k > 0 && o.top_k < vocab) {
    std::vector<float> sorted(logits, logits + vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
    cut = sorted[static_cast<std::size_t>(o.top_k - 1)];
  }
  std::vector<double> p(static_cast<std::size_t>(vocab));
  for (int v = 0; v < vocab; ++v)
    p[static_cast<std::size_t>(v)] = logits[v] < cut ? 0.0 : std::exp((logits[v] - logits[best]) / o.temperature);
  return std::discrete_distribution<int>(p.begin(), p.end())(rng);
}

} // namespace

std::string sample_text(const sample_options& o, const sample_sink& sink) {
  std::string path = o.model;
  if (std::filesystem::is_directory(path))
    path += "/model.safetensors";
  const auto md = read_model_metadata(path);
  const auto it = md.find("gradwire_config");
  check(it != md.end(), path + ": no gradwire_config in the header's metadata (not written by gradwire)");
  auto cfg = parse_config(it->second, path + " (its config)");
  check(cfg.model.kind == "gpt", path + ": holds a " + cfg.model.kind + ", not a language model (model.kind = \"gpt\")");
  check(cfg.dataset != "tokens", path + ": was trained on token ids (data.dataset = \"tokens\"), and sample writes bytes: "
                                 "decode its ids with the tokenizer that made its .bin files");
  check(!o.prompt.empty(), "sample: give a prompt (--prompt), at least one byte");
  check(o.tokens >= 0, "sample: --tokens must not be negative");
  check(std::isfinite(o.temperature) && o.temperature >= 0,
        "sample: --temperature must be a finite number, 0 or more (0: greedy), not " + std::to_string(o.temperature));
  check(o.top_k >= 0, "sample: --top-k must not be negative (0: every byte)");
  auto& spec = cfg.model;
  spec.channels = spec.height = 1, spec.width = spec.context, spec.classes = spec.vocab;
  models::model m(spec, kernels::device::cpu(), cfg.seed);
  load_model_file(path, m);
  const auto bad = first_non_finite(m);
  check(bad.empty(), path + ": the model holds a value that is not a finite number in " + bad +
                       " (a run that diverged?): it cannot be sampled");
  auto rep = m.make_replica(true);
  std::mt19937_64 rng(o.seed);
  std::string text = o.prompt;
  if (sink)
    sink(text.data(), text.size());
  std::vector<float> window;
  for (int i = 0; i < o.tokens; ++i) {
    // As nanoGPT: the model sees at most its context, the last bytes.
    const auto from = text.size() > static_cast<std::size_t>(spec.context) ? text.size() - spec.context : 0;
    window.clear();
    for (std::size_t j = from; j < text.size(); ++j)
      window.push_back(static_cast<float>(static_cast<unsigned char>(text[j])));
    const auto t = static_cast<std::int64_t>(window.size());
    const auto& logits = rep->net.forward(kernels::tensor::from(window, {1, 1, 1, t}), false);
    text.push_back(static_cast<char>(pick(logits.data() + (t - 1) * spec.vocab, std::min(spec.vocab, 256),
                                          o, rng)));
    if (sink)
      sink(&text.back(), 1);
  }
  return text;
}

} // namespace gradwire::scheduler
