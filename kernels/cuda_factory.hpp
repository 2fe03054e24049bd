#pragma once
/// @file cuda_factory.hpp
/// The seam between the backend registry and the CUDA kernels. CMake links
/// either kernels/cuda/ (the real factory) or cuda_absent.cpp (a CPU-only
/// build that explains how to get CUDA); no #if ladders in the callers.

#include "kernels/backend.hpp"

#include <memory>

namespace gradwire::kernels::cuda_factory {

bool built();
int device_count();
/// Creates the backend for CUDA device `index` (throws gradwire::error).
std::unique_ptr<backend> make(int index);

} // namespace gradwire::kernels::cuda_factory
