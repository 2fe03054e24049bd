#include "models/layers/gpt.hpp"

#include "kernels/error.hpp"

#include <cmath>

namespace gradwire::models {

namespace {
/// GPT-2's initial standard deviation.
constexpr float gpt_init_std = 0.02f;
} // namespace

gpt::gpt(gpt_shape s) : s_(s) {
  check(s.layers > 0 && s.heads > 0 && s.d > 0 && s.context > 0 && s.vocab > 0,
        "gpt: layers, heads, d_model, context and vocab must be positive");
  check(s.dropout >= 0.f && s.dropout < 1.f, "gpt: model.dropout = " + std::to_string(s.dropout) + " is not in [0, 1)");
  check(s.d % s.heads == 0, "gpt: model.heads = " + std::to_string(s.heads) + " does not divide model.d_model = " +
                              std::to_string(s.d) + " (each head takes d_model / heads features)");
}

shape_t gpt::output_shape(const shape_t& in) const {
  check(in.size() == 4 && in[1] == 1 && in[2] == 1 && in[3] >= 1 && in[3] <= s_.context,
        "gpt: input " + kernels::to_string(in) + " is not [n, 1, 1, t] token ids with 1 <= t <= context (" +
          std::to_string(s_.context) + ")");
  return {in[0] * in[3], s_.vocab};
}

void gpt::describe(std::vector<param_spec>& p, std::vector<param_spec>&, const std::string&) const {
  const std::int64_t d = s_.d;
  const float proj_std = gpt_init_std / std::sqrt(2.f * static_cast<float>(s_.layers));
  auto normal = [&](const std::string& name, shape_t shape, float sd, bool decay) {
    p.push_back({name, std::move(shape), init_kind::normal, 1, sd, decay});
  };
  auto fixed = [&](const std::string& name, std::int64_t n, init_kind k) { p.push_back({name, {n}, k}); };
  normal("transformer.wte.weight", {s_.vocab, d}, gpt_init_std, false);
  normal("transformer.wpe.weight", {s_.context, d}, gpt_init_std, false);
  for (int l = 0; l < s_.layers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    fixed(h + "ln_1.weight", d, init_kind::ones);
    fixed(h + "ln_1.bias", d, init_kind::zeros);
    normal(h + "attn.c_attn.weight", {3 * d, d}, gpt_init_std, true);
    fixed(h + "attn.c_attn.bias", 3 * d, init_kind::zeros);
    normal(h + "attn.c_proj.weight", {d, d}, proj_std, true);
    fixed(h + "attn.c_proj.bias", d, init_kind::zeros);
    fixed(h + "ln_2.weight", d, init_kind::ones);
    fixed(h + "ln_2.bias", d, init_kind::zeros);
    normal(h + "mlp.c_fc.weight", {4 * d, d}, gpt_init_std, true);
    fixed(h + "mlp.c_fc.bias", 4 * d, init_kind::zeros);
    normal(h + "mlp.c_proj.weight", {d, 4 * d}, proj_std, true);
    fixed(h + "mlp.c_proj.bias", d, init_kind::zeros);
  }
  fixed("transformer.ln_f.weight", d, init_kind::ones);
  fixed("transformer.ln_f.bias", d, init_kind::zeros);
}

void gpt::bind(param_binder& b) {
  layer::bind(b);
  const std::int64_t d = s_.d;
  wte_ = b.param("transformer.wte.weight", {s_.vocab, d});
  wpe_ = b.param("transformer.wpe.weight", {s_.context, d});
  blocks_.resize(static_cast<std::size_t>(s_.layers));
  for (auto& k : blocks_) {
    k.ln1_w = b.param("ln_1.weight", {d});
    k.ln1_b = b.param("ln_1.bias", {d});
    k.attn_w = b.param("attn.c_attn.weight", {3 * d, d});
    k.attn_b = b.param("attn.c_attn.bias", {3 * d});
    k.proj_w = b.param("attn.c_proj.weight", {d, d});
    k.proj_b = b.param("attn.c_proj.bias", {d});
    k.ln2_w = b.param("ln_2.weight", {d});
    k.ln2_b = b.param("ln_2.bias", {d});
    k.fc_w = b.param("mlp.c_fc.weight", {4 * d, d});
    k.fc_b = b.param("mlp.c_fc.bias", {4 * d});
    k.mlp_w = b.param("mlp.c_proj.weight", {d, 4 * d});
    k.mlp_b = b.param("mlp.c_proj.bias", {d});
  }
  lnf_w_ = b.param("transformer.ln_f.weight", {d});
  lnf_b_ = b.param("transformer.ln_f.bias", {d});
  acts_.resize(blocks_.size());
}

double gpt::forward_flops(const shape_t& in) const {
  const double t = static_cast<double>(in.back()), d = s_.d;
  const double per_token = s_.layers * (2 * 12 * d * d + 2 * d * (t + 1)) + 2 * d * s_.vocab;
  return t * per_token;
}

} // namespace gradwire::models
