#pragma once
/// @file build_info.hpp
/// `gradwire info`: what this build and machine give a run (CUDA kernels
/// and devices, the CPU's GEMM and convolution libraries, activation layout).

#include <string>

namespace gradwire::scheduler {

/// The lines `gradwire info` prints, each ending in a newline.
std::string build_info();

} // namespace gradwire::scheduler
