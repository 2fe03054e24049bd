#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda_factory.hpp"

namespace gradwire::kernels::cuda_factory {

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::unique_ptr<backend> make(int index) { return std::make_unique<cuda_backend>(index); }

} // namespace gradwire::kernels::cuda_factory
