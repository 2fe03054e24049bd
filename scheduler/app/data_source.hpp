#pragma once
/// @file data_source.hpp
/// Loads the training and test sets a config names, and fills the model's
/// input shape and class count from them.

#include "models/dataset.hpp"
#include "scheduler/app/config.hpp"

namespace gradwire::scheduler {

struct data_pair {
  models::dataset train, test;
  /// data.normalize: the pixels (/ 255) became (x - input_mean) / input_std.
  double input_mean = 0, input_std = 1;
};

/// Loads (and subsets) the data of `cfg`; sets cfg.model's input shape.
data_pair load_data(run_config& cfg);

} // namespace gradwire::scheduler
