#include "kernels/backend.hpp"

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cuda_factory.hpp"
#include "kernels/error.hpp"

#include <map>
#include <mutex>

namespace gradwire::kernels {

bool built_with_cuda() { return cuda_factory::built(); }

std::string cuda_unavailable() { return cuda_factory::unavailable(); }

int cuda_device_count() {
  static const int count = cuda_factory::device_count();
  return count;
}

backend& backend_for(const device& d) {
  static cpu_backend cpu;
  if (d.is_cpu())
    return cpu;
  // One backend per CUDA device, created on first use and kept for the
  // process lifetime (it owns the cuBLAS/cuDNN handles of that device).
  static std::mutex mu;
  static std::map<int, std::unique_ptr<backend>> cuda;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cuda.find(d.index);
  if (it != cuda.end())
    return *it->second;
  if (cuda_factory::built()) {
    const int count = cuda_device_count();
    const auto why = cuda_factory::unavailable();
    check(d.index < count, "device " + to_string(d) + " requested, but " + std::to_string(count) +
                             " CUDA device(s) are visible" +
                             (!why.empty() ? " (" + why + ")"
                              : count == 0 ? " (no GPU, or no driver, on this machine)"
                                           : ""));
  }
  auto be = cuda_factory::make(d.index);
  auto& ref = *be;
  cuda.emplace(d.index, std::move(be));
  return ref;
}

} // namespace gradwire::kernels
