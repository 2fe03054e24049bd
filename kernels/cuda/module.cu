// libgradwire_cuda.so's entry (kernels/cuda_module.hpp): the device count and
// the backend factory, looked up by kernels/cuda_loader.cpp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/module_log.hpp"
#include "kernels/cuda_module.hpp"

#include <atomic>

namespace {

std::atomic<gradwire::kernels::cuda_module::log_sink> sink{nullptr};

void set_log(gradwire::kernels::cuda_module::log_sink s) { sink = s; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

gradwire::kernels::backend* make(int index) { return new gradwire::kernels::cuda_backend(index); }

const gradwire::kernels::cuda_module::api table{GRADWIRE_BACKEND_ABI, &device_count, &make, &set_log};

} // namespace

void gradwire::kernels::cuda_detail::log_line(const std::string& line) {
  if (const auto s = sink.load())
    s(line.c_str());
}

extern "C" __attribute__((visibility("default"))) const gradwire::kernels::cuda_module::api* gradwire_cuda_module() {
  return &table;
}
