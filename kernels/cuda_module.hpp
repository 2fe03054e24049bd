#pragma once
/// @file cuda_module.hpp
/// What libgradwire_cuda.so (kernels/cuda/, with cuBLAS and cuDNN) gives the
/// process that loads it: kernels/cuda_loader.cpp opens it on the first use
/// of a CUDA device, so that a CPU run never pays for loading those
/// libraries (cuBLASLt's start-up alone was 0.5 s of every process's start).
///
/// The module and the loader are built from the same tree. `abi` is a hash of
/// the headers whose layout they share (backend.hpp and what it includes),
/// taken by CMake; a module of another build is refused, never called.

#include "kernels/backend.hpp"

namespace gradwire::kernels::cuda_module {

/// Takes one line of the module's diagnostics (the profile's table,
/// cuDNN's algorithm choices) for the process's log.
using log_sink = void (*)(const char* line);

struct api {
  const char* abi;      ///< GRADWIRE_BACKEND_ABI of the module's build
  int (*device_count)(); ///< visible CUDA devices (0 without a driver)
  backend* (*make)(int index); ///< a new backend for device `index`; throws gradwire::error
  void (*set_log)(log_sink sink); ///< where the module's lines go from now on (the loader's, at load)
};

/// The module's one exported symbol: extern "C" const api* gradwire_cuda_module().
inline constexpr const char* entry = "gradwire_cuda_module";
/// The module's file name, looked for next to the executable and one folder up.
inline constexpr const char* file_name = "libgradwire_cuda.so";

} // namespace gradwire::kernels::cuda_module
