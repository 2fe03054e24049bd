#include "models/model.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"

#include <cmath>
#include <random>

namespace gradwire::models {

namespace {

// Each tensor starts on a 64-byte boundary (16 floats) inside its buffer.
constexpr std::size_t align_floats = 16;

std::size_t layout(const std::vector<param_spec>& specs, std::vector<std::size_t>& offsets) {
  std::size_t off = 0;
  offsets.clear();
  for (const auto& s : specs) {
    offsets.push_back(off);
    off += (static_cast<std::size_t>(kernels::numel(s.shape)) + align_floats - 1) / align_floats *
           align_floats;
  }
  return off;
}

void fill_init(const param_spec& s, std::mt19937_64& rng, std::uint64_t seed, float* out) {
  const auto n = static_cast<std::size_t>(kernels::numel(s.shape));
  switch (s.init) {
  case init_kind::ones:
    std::fill(out, out + n, 1.f);
    break;
  case init_kind::zeros:
    std::fill(out, out + n, 0.f);
    break;
  case init_kind::normal: {
    std::normal_distribution<float> g(0.f, s.stddev);
    for (std::size_t i = 0; i < n; ++i)
      out[i] = g(rng);
    break;
  }
  case init_kind::from_layer:
    s.fill(seed, out);
    break;
  case init_kind::uniform_fan_in: {
    const float bound = 1.f / std::sqrt(static_cast<float>(s.fan_in));
    std::uniform_real_distribution<float> u(-bound, bound);
    for (std::size_t i = 0; i < n; ++i)
      out[i] = u(rng);
    break;
  }
  }
}

} // namespace

model::model(model_spec spec, kernels::device dev, std::uint64_t seed)
  : model([spec] { return make_network(spec); }, spec, dev, seed) {}

model::model(std::function<network()> factory, model_spec spec, kernels::device dev,
             std::uint64_t seed)
  : spec_(std::move(spec)), factory_(std::move(factory)) {
  auto proto = factory_();
  proto.describe(param_specs_, state_specs_);
  const auto np = layout(param_specs_, param_offsets_);
  const auto ns = layout(state_specs_, state_offsets_);
  params_ = tensor::zeros({static_cast<std::int64_t>(np)}, dev);
  state_ = tensor::zeros({static_cast<std::int64_t>(ns)}, dev);
  init(seed);
}

void model::share_params(const tensor& shared) {
  check(!bound_, "share_params: replicas are already bound to this model's own parameters (share before making a trainer)");
  check(shared.defined() && shared.numel() == params_.numel() && shared.dev() == params_.dev(),
        "share_params: a parameter buffer of " + std::to_string(params_.numel()) + " floats on the same device expected");
  params_ = shared;
}

void model::init(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto fill = [&](const std::vector<param_spec>& specs, const std::vector<std::size_t>& offs,
                  const tensor& buf) {
    std::vector<float> host(static_cast<std::size_t>(buf.numel()), 0.f);
    for (std::size_t i = 0; i < specs.size(); ++i)
      fill_init(specs[i], rng, seed, host.data() + offs[i]);
    kernels::copy(tensor::from(host, buf.shape()), buf);
  };
  fill(param_specs_, param_offsets_, params_);
  fill(state_specs_, state_offsets_, state_);
}

std::unique_ptr<model::replica> model::make_replica(bool owns_state, kernels::thread_pool* pool) const {
  bound_ = true;
  auto grads = tensor::zeros(params_.shape(), params_.dev());
  auto r = std::make_unique<replica>(replica{factory_(), grads});
  param_binder b(param_specs_, param_offsets_, state_specs_, state_offsets_, params_, grads,
                 state_, owns_state, pool);
  r->net.bind(b);
  return r;
}

param_layout layout_of(const model_spec& spec) {
  param_layout out;
  std::vector<param_spec> state;
  make_network(spec).describe(out.specs, state);
  layout(out.specs, out.offsets);
  return out;
}

std::int64_t model::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& s : param_specs_)
    n += kernels::numel(s.shape);
  return n;
}

double model::train_flops_per_sample() const {
  return factory_().train_flops({spec_.channels, spec_.height, spec_.width});
}

double model::forward_flops_per_sample() const {
  return factory_().forward_flops({spec_.channels, spec_.height, spec_.width});
}

} // namespace gradwire::models
