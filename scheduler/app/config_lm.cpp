#include "scheduler/app/config_lm.hpp"

#include "kernels/error.hpp"

#include <toml++/toml.h>

namespace gradwire::scheduler {

using config_toml::reader;

void read_transformer(reader& r, run_config& c) {
  auto& m = c.model;
  m.layers = static_cast<int>(r.integer("model.layers"));
  m.heads = static_cast<int>(r.integer("model.heads"));
  m.d_model = static_cast<int>(r.integer("model.d_model"));
  m.context = static_cast<int>(r.integer("model.context"));
  m.vocab = static_cast<int>(r.integer("model.vocab")); // token ids are exact in a float below 2^24
  m.dropout = static_cast<float>(r.number("model.dropout"));
  check(m.dropout < 1.f, r.loc("model.dropout") + " = 1 drops everything: give a probability below 1");
  check(m.d_model % m.heads == 0, r.loc("model.heads") + " = " + std::to_string(m.heads) +
                                    " does not divide model.d_model = " + std::to_string(m.d_model) +
                                    " (each head takes d_model / heads features)");
}

void read_optimizer_extras(reader& r, run_config& c) {
  const auto* betas = r.get("train.betas").as_array();
  check(betas != nullptr && betas->size() == 2,
        r.loc("train.betas") + ": two numbers expected, [beta1, beta2]");
  for (std::size_t i = 0; i < 2; ++i) {
    const double b = (*betas)[i].value<double>().value_or(-1);
    check(b >= 0 && b < 1, r.loc("train.betas") + ": each beta must be in [0, 1), got " + std::to_string(b));
    (i == 0 ? c.opt.beta1 : c.opt.beta2) = static_cast<float>(b);
  }
  c.opt.eps = static_cast<float>(r.number("train.eps"));
  c.opt.clip_norm = static_cast<float>(r.number("train.clip_norm"));
  c.opt.accumulate = static_cast<int>(r.integer("train.accumulate"));
  c.opt.on_nonfinite = r.str("train.on_nonfinite");
  c.warmup_steps = r.integer("train.warmup_steps");
}

void check_text_partition(reader& r, const run_config& c, bool text) {
  check(c.partition.kind == "iid" || c.partition.kind == "contiguous" || !text,
        r.loc("data.partition") + " = \"" + c.partition.kind +
          "\" splits by class label; text windows have none (use \"iid\" or \"contiguous\")");
  check(c.partition.kind != "contiguous" || text,
        r.loc("data.partition") + " = \"contiguous\" gives each worker its own stretch of a text corpus; " + c.dataset +
          " is no text (use \"iid\", \"dirichlet\" or \"classes\")");
}

} // namespace gradwire::scheduler
