#pragma once
/// @file torch_module.hpp
/// What libgradwire_torch.so (models/torch/, an embedded Python with
/// PyTorch) gives the process that loads it: models/torch_layer.cpp opens it
/// for the first model.kind = "torch", so that the core build and every
/// other run never depend on Python or torch.
///
/// The boundary holds only standard types and raw float pointers: the
/// module links none of gradwire's libraries. Its side of each call holds
/// the GIL for that call alone. Errors are std::runtime_error whose text
/// is the user's traceback where user code raised it. The module and the
/// loader are built from the same tree; `abi` is a hash of this header,
/// taken by CMake, and a module of another build is refused.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::models::torch_module {

struct tensor_info {
  std::string name;             ///< the module's own name (state_dict's)
  std::vector<std::int64_t> shape;
};

/// One replica of the user's nn.Module: its parameters and floating-point
/// buffers are views of memory the caller owns (bind), so that an update
/// of gradwire's flat buffers is what the module computes with.
class replica {
public:
  virtual ~replica() = default;
  /// Parameter `i` (in describe()'s order) from now on reads `value` and
  /// accumulates its gradient into `grad` (numel floats each).
  virtual void bind_param(std::size_t i, float* value, float* grad) = 0;
  /// Floating-point buffer `i` (BatchNorm's running statistics) lives at `value`.
  virtual void bind_buffer(std::size_t i, float* value) = 0;
  /// Runs the module on `x` (`shape`, batch first, read in place) in
  /// training or evaluation mode; returns the output's shape. The output
  /// stays with the replica for output() and backward().
  virtual std::vector<std::int64_t> forward(const float* x, const std::vector<std::int64_t>& shape, bool train) = 0;
  /// Copies the last forward's output (float32, row-major) to `out`.
  virtual void output(float* out) = 0;
  /// Back-propagates dL/doutput (the output's shape) into the bound
  /// gradients, which the caller zeroed.
  virtual void backward(const float* dy) = 0;
  /// The module's loss(output, target) (model::has_loss) of the last
  /// forward's output against `targets` (class indices, one per output
  /// row): {the sum over rows, the correct argmax predictions}; with
  /// `d_out`, also `scale` x d(that sum)/d(output) there (the output's shape).
  virtual std::pair<double, std::int64_t> loss(const std::int32_t* targets, float scale, float* d_out) = 0;
};

/// The user's module file, loaded once, with the run's config.
class model {
public:
  virtual ~model() = default;
  /// named_parameters() and the floating-point named_buffers(), in order.
  virtual const std::vector<tensor_info>& params() const = 0;
  virtual const std::vector<tensor_info>& buffers() const = 0;
  /// The initial values of parameter (or buffer) `i` of the module that
  /// model(cfg) builds under torch.manual_seed(seed).
  virtual void initial(std::uint64_t seed, bool buffer, std::size_t i, float* out) = 0;
  virtual std::unique_ptr<replica> make_replica() = 0;
  /// Whether the file defines loss(output, target) (else the loss is
  /// gradwire's softmax cross-entropy).
  virtual bool has_loss() const = 0;
  /// Reads the module's dataset(split, cfg) ("train" or "test") whole:
  /// returns {items, one input's shape...}; the arrays wait in the model
  /// for take_dataset().
  virtual std::vector<std::int64_t> dataset(const std::string& split) = 0;
  /// Copies the split's inputs (float32, items x an input's numel) and
  /// targets (items class indices) to `x` and `y`, and lets them go.
  virtual void take_dataset(const std::string& split, float* x, std::int32_t* y) = 0;
};

/// A parameter-server rule written in Python (topology.ps.rule =
/// "file.py:Class", docs/your-algorithm.md): one instance per shard.
class rule {
public:
  virtual ~rule() = default;
  /// One push of `rank`, `staleness` versions stale, to the shard whose
  /// `n` parameters are at `params` (at `version`). `grad` is the rule's
  /// own copy of the push, which it may change in place. Returns the lr
  /// factor at which the shard's optimizer applies `grad`, or nothing when
  /// the rule has updated `params` itself.
  virtual std::optional<float> push(float* params, float* grad, std::size_t n, int rank, std::int64_t staleness,
                                    std::int64_t version) = 0;
};

struct api {
  const char* abi; ///< GRADWIRE_TORCH_ABI of the module's build
  /// Loads `path` (a .py file defining model(cfg)) with the run's config
  /// as TOML text (handed to model() as nested dicts) and sets torch's
  /// intra-op threads to `threads`. Its replicas compute on `device`
  /// ("cpu", or "cuda[:N]": the module on the GPU, the bound buffers in
  /// host memory, copied in and out each step).
  std::shared_ptr<model> (*open)(const std::string& path, const std::string& config_toml, int threads,
                                 const std::string& device);
  /// Makes an instance of class `cls` of the file `path`, handed the run's
  /// config (TOML text, as nested dicts).
  std::shared_ptr<rule> (*open_rule)(const std::string& path, const std::string& cls, const std::string& config_toml);
};

/// The module's one exported symbol: extern "C" const api* gradwire_torch_module().
inline constexpr const char* entry = "gradwire_torch_module";
/// The module's file name, looked for next to the executable and one folder up.
inline constexpr const char* file_name = "libgradwire_torch.so";

} // namespace gradwire::models::torch_module
