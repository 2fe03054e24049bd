#pragma once
/// @file model_file.hpp
/// The trained model as a file: model.safetensors (the layout PyTorch and
/// Hugging Face read: an 8-byte little-endian header length, a JSON header
/// giving each tensor's dtype, shape and byte offsets, then the raw
/// little-endian data). Tensors are named after the layers
/// ("1.linear.weight", "3.batchnorm2d.running_mean", ...): every parameter,
/// and BatchNorm's running statistics. The header's __metadata__ holds the
/// run's resolved config (so `gradwire eval` rebuilds the model and finds
/// its data) and the input normalisation.

#include "models/model.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gradwire::scheduler {

using model_metadata = std::map<std::string, std::string>;

/// What a run's model file says of it: the resolved config and the input
/// normalisation (pixels / 255, then (x - input_mean) / input_std).
model_metadata run_metadata(const std::string& resolved_toml, const models::model_spec& spec, double input_mean,
                            double input_std);

/// The safetensors bytes of `m`'s layout with these parameter and state
/// values (host floats of m.size() and m.state().numel()).
std::string safetensors_of(const models::model& m, const float* params, const float* state,
                           const model_metadata& metadata);

/// The __metadata__ of a model file. Throws gradwire::error naming the
/// file and what is wrong (too short, a header past its end, not JSON).
model_metadata read_model_metadata(const std::string& path);

/// Fills `into`'s parameters and state (host) from the file: every tensor
/// the model has must be there, F32, with its shape and its bytes inside
/// the file. Throws gradwire::error naming the file and the tensor.
void load_model_file(const std::string& path, models::model& into);
/// The first of `m`'s tensors holding a NaN or an infinity, with where
/// ("tok_emb (element 12 is nan)"); "" when every value is finite.
std::string first_non_finite(models::model& m);
/// The same from the file's bytes; `path` names it in messages.
model_metadata model_metadata_of(const std::string& bytes, const std::string& path);
void load_model_bytes(const std::string& bytes, const std::string& path, models::model& into);

struct model_eval {
  std::string file, dataset;
  std::int64_t samples = 0;
  double accuracy = 0, loss = 0;
};

/// `gradwire eval`: the model in `path` (a model.safetensors, or a run's
/// folder holding one) rebuilt from its config and evaluated on that
/// config's test set; `overrides` (key=value, as --set) change the config
/// first (data.path, data.test_subset, train.threads, ...).
model_eval evaluate_model_file(std::string path, const std::vector<std::string>& overrides);

} // namespace gradwire::scheduler
