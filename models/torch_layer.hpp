#pragma once
/// @file torch_layer.hpp
/// model.kind = "torch": the user's nn.Module as one layer of a gradwire
/// network. Its parameters and floating-point buffers are described as the
/// module names them, start as the module initialises them under the run's
/// seed, and are views of the model's flat buffers (models/torch_module.hpp),
/// so gradwire's optimizer, exchanges, shards and checkpoints see them as a
/// built-in layer's. The network's loss (cross-entropy on [batch, classes]
/// logits) and everything around the step stay gradwire's.

#include "models/dataset.hpp"
#include "models/layer.hpp"
#include "models/torch_module.hpp"

#include <memory>

namespace gradwire::models {

struct model_spec;

/// The module of spec.module with spec.config_toml, loaded once per
/// process and spec (libgradwire_torch.so, loaded on first use).
std::unique_ptr<layer> make_torch_layer(const model_spec& spec);

/// data.dataset = "module": the module's dataset(split, cfg) ("train" or
/// "test") read whole into a dataset: inputs as float32 samples of 1 to 3
/// dimensions (shaped [1, 1, features], [1, height, width] or as given),
/// targets as class indices; `classes` is left at the largest target + 1.
/// Throws gradwire::error with the module's own words (its traceback).
dataset load_torch_dataset(const model_spec& spec, const std::string& split);

/// topology.ps.rule = "file.py:Class": a new instance of the class, handed
/// the run's config (TOML text), through libgradwire_torch.so. Throws
/// gradwire::error naming the rule (its traceback where it raised).
std::shared_ptr<torch_module::rule> open_python_rule(const std::string& path, const std::string& cls,
                                                     const std::string& config_toml);

/// Whether libgradwire_torch.so can be loaded here; otherwise why not.
std::string torch_unavailable();

} // namespace gradwire::models
