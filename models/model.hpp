#pragma once
/// @file model.hpp
/// A model: its spec, the layout of its parameters, and the contiguous
/// buffers that hold them. All parameters live in one buffer, all state
/// (BatchNorm running statistics) in another; a replica is a network bound
/// to those parameters plus a gradient buffer of the same layout. So a
/// parameter-server shard is a range, a bucket is a range, and an allreduce
/// is one buffer.

#include "kernels/device.hpp"
#include "models/network.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace gradwire::models {

class model {
public:
  /// Builds the layout and the buffers on `dev`, initialised from `seed`.
  model(model_spec spec, kernels::device dev, std::uint64_t seed);
  /// A model of any network `factory` builds (custom networks, tests);
  /// `spec` still gives the input shape and class count.
  model(std::function<network()> factory, model_spec spec, kernels::device dev, std::uint64_t seed);

  /// A network bound to this model's parameters with its own gradient
  /// buffer. Only a replica that owns_state updates BatchNorm statistics.
  struct replica {
    network net;
    tensor grads;
  };
  /// Its layers may split their work over `pool` (intra-layer parallelism).
  std::unique_ptr<replica> make_replica(bool owns_state, kernels::thread_pool* pool = nullptr) const;

  /// Uses `shared` (same length and device) as this model's parameters from
  /// now on, e.g. one weight buffer for the replicas of a synchronous ring
  /// in one process whose owners each update their own chunks. Only before
  /// the first make_replica (replicas bind to the buffer they were made on):
  /// later it throws.
  void share_params(const tensor& shared);

  /// (Re)initialises parameters and state deterministically from `seed`.
  void init(std::uint64_t seed);

  const model_spec& spec() const { return spec_; }
  kernels::device dev() const { return params_.dev(); }
  const tensor& params() const { return params_; }
  const tensor& state() const { return state_; }
  /// Length of the parameter (and gradient) buffer in floats, padding included.
  std::size_t size() const { return static_cast<std::size_t>(params_.numel()); }
  /// Number of trainable scalars (padding excluded).
  std::int64_t parameter_count() const;
  const std::vector<param_spec>& param_specs() const { return param_specs_; }
  const std::vector<std::size_t>& param_offsets() const { return param_offsets_; }
  const std::vector<param_spec>& state_specs() const { return state_specs_; }
  const std::vector<std::size_t>& state_offsets() const { return state_offsets_; }
  /// Forward FLOPs for one sample; a training step costs about 3x this.
  double forward_flops_per_sample() const;
  /// Training FLOPs for one sample (network::train_flops).
  double train_flops_per_sample() const;

private:
  model_spec spec_;
  std::function<network()> factory_;
  std::vector<param_spec> param_specs_, state_specs_;
  std::vector<std::size_t> param_offsets_, state_offsets_;
  tensor params_, state_;
  mutable bool bound_ = false; ///< a replica has been made (share_params is too late then)
};

/// The parameter layout a model of `spec` has, without allocating it: each
/// tensor's spec and its offset in the parameter buffer.
struct param_layout {
  std::vector<param_spec> specs;
  std::vector<std::size_t> offsets;
};
param_layout layout_of(const model_spec& spec);

} // namespace gradwire::models
