#include "models/layer.hpp"

#include "kernels/error.hpp"

#include <atomic>

namespace gradwire::models {

param_binder::param_binder(const std::vector<param_spec>& params,
                           const std::vector<std::size_t>& param_offsets,
                           const std::vector<param_spec>& state,
                           const std::vector<std::size_t>& state_offsets, tensor param_buf,
                           tensor grad_buf, tensor state_buf, bool owns_state,
                           kernels::thread_pool* pool)
  : params_(params), param_offsets_(param_offsets), state_(state), state_offsets_(state_offsets),
    param_buf_(std::move(param_buf)), grad_buf_(std::move(grad_buf)),
    state_buf_(std::move(state_buf)), owns_state_(owns_state), pool_(pool) {}

param_binder::bound param_binder::param(const std::string& name, const shape_t& shape) {
  check(next_param_ < params_.size(), "binding parameter '" + name + "' beyond the model layout");
  const auto& spec = params_[next_param_];
  check(spec.shape == shape, "parameter '" + spec.name + "' bound with shape " +
                               kernels::to_string(shape) + " but described as " +
                               kernels::to_string(spec.shape));
  auto off = param_offsets_[next_param_++];
  return {param_buf_.view(off, shape), grad_buf_.view(off, shape)};
}

std::size_t param_binder::position() const {
  return next_param_ < param_offsets_.size() ? param_offsets_[next_param_] : static_cast<std::size_t>(grad_buf_.numel());
}

tensor param_binder::state(const std::string& name, const shape_t& shape) {
  check(next_state_ < state_.size(), "binding state '" + name + "' beyond the model layout");
  auto off = state_offsets_[next_state_++];
  return state_buf_.view(off, shape);
}

kernels::backend& param_binder::be() const { return kernels::backend_for(param_buf_.dev()); }

namespace {
std::atomic<param_binder::zeroing> g_zeroing{param_binder::zeroing::automatic};
}

void param_binder::set_zeroing(zeroing z) { g_zeroing = z; }

bool param_binder::grads_zeroed_whole() const {
  if (!grad_buf_.defined())
    return false;
  switch (g_zeroing.load()) {
  case zeroing::whole: return true;
  case zeroing::per_layer: return false;
  default: return !grad_buf_.dev().is_cpu();
  }
}

void param_binder::finish() const {
  check(next_param_ == params_.size() && next_state_ == state_.size(),
        "network bound " + std::to_string(next_param_) + " of " + std::to_string(params_.size()) +
          " parameters and " + std::to_string(next_state_) + " of " +
          std::to_string(state_.size()) + " state tensors");
}

tensor scratch::get(const shape_t& shape, kernels::device dev, kernels::dtype dt) {
  auto n = kernels::numel(shape);
  if (!buf_.defined() || buf_.numel() < n || buf_.dev() != dev || buf_.type() != dt)
    buf_ = tensor::empty({n}, dev, dt);
  return tensor(buf_.shared_storage(), buf_.offset(), shape, dt);
}

} // namespace gradwire::models
