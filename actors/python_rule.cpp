/// @file python_rule.cpp
/// topology.ps.rule = "FILE.py:Class": an async parameter server whose shards
/// take each push through a user's Python class (docs/your-algorithm.md),
/// run by the embedded interpreter of the torch plug-in. The class sees
/// numpy views of the shard's parameters and of its own copy of the push,
/// with the push's rank, staleness and the shard's version; it returns the
/// learning rate's factor for the shard's optimizer (after changing the
/// gradient in place, or as (gradient, factor)), or None once it has
/// updated the parameters itself.
#include "actors/ps_shard_state.hpp"
#include "actors/server_rule.hpp"

#include "models/torch_layer.hpp"

#include <cstring>

namespace gradwire::actors {
namespace shard_detail {

namespace {

class python_rule final : public server_rule {
public:
  python_rule(std::shared_ptr<models::torch_module::rule> rule, std::size_t len)
      : rule_(std::move(rule)), scratch_(slice::empty({static_cast<std::int64_t>(len)})) {}
  const char* name() const override { return "Python"; }
  bool rounds() const override { return false; }
  void apply_push(shard_state& st, int rank, std::int64_t staleness, const float* grad, float lr_scale) override {
    std::memcpy(scratch_.data(), grad, len(st) * sizeof(float)); // the push itself may be shared with its worker
    const auto factor = rule_->push(st.params.data(), scratch_.data(), len(st), rank, staleness, st.version);
    if (factor)
      apply(st, scratch_.data(), *factor * lr_scale);
    else
      applied(st);
  }

private:
  std::shared_ptr<models::torch_module::rule> rule_;
  slice scratch_;
};

} // namespace

std::unique_ptr<server_rule> make_python_rule(const shard_config& cfg, std::size_t len) {
  return std::make_unique<python_rule>(cfg.python_rule ? cfg.python_rule : actors::open_python_rule(cfg), len);
}

} // namespace shard_detail

std::shared_ptr<models::torch_module::rule> open_python_rule(const shard_config& cfg) {
  return models::open_python_rule(cfg.ps.rule_file, cfg.ps.rule_class, cfg.ps.rule_config);
}

} // namespace gradwire::actors
