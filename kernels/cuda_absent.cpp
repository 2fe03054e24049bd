#include "kernels/cuda_factory.hpp"

#include "kernels/error.hpp"

namespace gradwire::kernels::cuda_factory {

bool built() { return false; }
int device_count() { return 0; }
std::string unavailable() { return {}; } // nothing was built to load

std::unique_ptr<backend> make(int index) {
  throw error("device cuda:" + std::to_string(index) +
              " requested, but this gradwire was built without CUDA: install the CUDA toolkit "
              "and cuDNN, then rebuild with -DGRADWIRE_CUDA=ON");
}

} // namespace gradwire::kernels::cuda_factory
