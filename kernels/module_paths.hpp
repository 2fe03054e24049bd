#pragma once
/// @file module_paths.hpp
/// Where a loaded module of gradwire's (the CUDA kernels, the torch
/// plug-in) is looked for: the path in environment variable `env` alone
/// when it is set; else `file_name` next to the executable, one folder up
/// (build/ holds it; tests/ is below) and in ../lib/gradwire (installed);
/// else `built`, where this build put it (may be null).

#include <string>
#include <vector>

namespace gradwire::kernels {

std::vector<std::string> module_paths(const char* env, const char* file_name, const char* built);

} // namespace gradwire::kernels
