#pragma once
/// @file config_lm.hpp
/// The keys that language-model training added (internal to
/// scheduler/app): the GPT's shape, and Adam's constants, clipping,
/// accumulation and warm-up in steps, read and checked into run_config.

#include "scheduler/app/config.hpp"
#include "scheduler/app/config_toml.hpp"

namespace gradwire::scheduler {

/// model.layers, heads, d_model, context, vocab.
void read_transformer(config_toml::reader& r, run_config& c);
/// data.partition against the data: by class label for images, iid or
/// contiguous stretches for text windows (`text`: data.dataset is text or tokens).
void check_text_partition(config_toml::reader& r, const run_config& c, bool text);
/// train.betas, eps, clip_norm, accumulate, warmup_steps.
void read_optimizer_extras(config_toml::reader& r, run_config& c);

} // namespace gradwire::scheduler
