// The CUDA kernels of a CUDA build, loaded on first use (kernels/cuda_module.hpp):
// libgradwire_cuda.so from $GRADWIRE_CUDA_MODULE, else next to the
// executable or one folder up (build/ holds it; tests/ is below), else
// where this build put it.
#include "kernels/cuda_factory.hpp"

#include "kernels/cuda_module.hpp"
#include "kernels/error.hpp"
#include "kernels/log.hpp"
#include "kernels/module_paths.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace gradwire::kernels::cuda_factory {

namespace {

struct loaded {
  const cuda_module::api* api = nullptr;
  std::string error; ///< why api is null
};

std::vector<std::string> candidates() {
  return module_paths("GRADWIRE_CUDA_MODULE", cuda_module::file_name, GRADWIRE_CUDA_MODULE_PATH);
}

loaded load() {
  loaded out;
  std::string tried;
  for (const auto& path : candidates()) {
    if (::access(path.c_str(), F_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      out.error = "the CUDA kernels (" + path + ") could not be loaded: " + (why != nullptr ? why : "dlopen failed") +
                  " (the CUDA runtime, cuBLAS and cuDNN must be on the library path)";
      return out;
    }
    auto entry = reinterpret_cast<const cuda_module::api* (*)()>(::dlsym(handle, cuda_module::entry));
    const cuda_module::api* api = entry != nullptr ? entry() : nullptr;
    if (api == nullptr) {
      out.error = path + " is not a gradwire CUDA module (no " + cuda_module::entry + ")";
      return out;
    }
    if (std::strcmp(api->abi, GRADWIRE_BACKEND_ABI) != 0) {
      out.error = path + " was built from other kernel headers (ABI " + api->abi + ", this gradwire " +
                  GRADWIRE_BACKEND_ABI + "): rebuild, or point GRADWIRE_CUDA_MODULE at this build's";
      return out; // the handle stays open: nothing of it is called
    }
    out.api = api; // kept for the process's life, as the backends it makes are
    api->set_log([](const char* line) { log::info("{}", line); });
    return out;
  }
  out.error = std::string("the CUDA kernels (") + cuda_module::file_name + ") were not found; looked for " + tried +
              " (build it: scripts/build.sh gradwire_cuda, or cmake --build BUILD --target gradwire_cuda; or set "
              "GRADWIRE_CUDA_MODULE to its path)";
  return out;
}

const loaded& module() {
  static const loaded m = load();
  return m;
}

} // namespace

bool built() { return true; }

int device_count() {
  const auto& m = module();
  return m.api != nullptr ? m.api->device_count() : 0;
}

std::string unavailable() { return module().error; }

std::unique_ptr<backend> make(int index) {
  const auto& m = module();
  if (m.api == nullptr)
    throw error("device cuda:" + std::to_string(index) + " requested, but " + m.error);
  return std::unique_ptr<backend>(m.api->make(index));
}

} // namespace gradwire::kernels::cuda_factory
