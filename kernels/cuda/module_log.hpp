#pragma once
/// @file module_log.hpp
/// The CUDA module's diagnostic lines (GRADWIRE_CUDA_PROFILE's table,
/// GRADWIRE_CUDNN_LOG's algorithm choices) go to the loading process's log
/// through the sink it hands the module (cuda_module::api::set_log), never
/// straight to stderr.

#include <string>

namespace gradwire::kernels::cuda_detail {

/// One line to the process's log (dropped before a sink is set).
void log_line(const std::string& line);

} // namespace gradwire::kernels::cuda_detail
