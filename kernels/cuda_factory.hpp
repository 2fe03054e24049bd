#pragma once
/// @file cuda_factory.hpp
/// The seam between the backend registry and the CUDA kernels. CMake links
/// either cuda_loader.cpp (a CUDA build: the kernels are a module, loaded on
/// first use) or cuda_absent.cpp (a CPU-only build that explains how to get
/// CUDA); no #if ladders in the callers.

#include "kernels/backend.hpp"

#include <memory>
#include <string>

namespace gradwire::kernels::cuda_factory {

/// Whether this gradwire was built with its CUDA kernels.
bool built();
/// Visible CUDA devices; 0 without a GPU, a driver, or a loadable module.
int device_count();
/// Why CUDA cannot be used here when it was built ("" when it can, or
/// before anything tried).
std::string unavailable();
/// Creates the backend for CUDA device `index` (throws gradwire::error).
std::unique_ptr<backend> make(int index);

} // namespace gradwire::kernels::cuda_factory
