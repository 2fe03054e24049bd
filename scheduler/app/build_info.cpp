#include "scheduler/app/build_info.hpp"

#include "kernels/backend.hpp"
#include "kernels/cpu/onednn_conv.hpp"
#include "kernels/cpu/onednn_gemm.hpp"
#include "models/network.hpp"
#include "models/torch_layer.hpp"
#include "scheduler/app/version.hpp"

#include <fmt/format.h>

namespace gradwire::scheduler {

std::string build_info() {
  std::string gemms = kernels::onednn_status();
  if (gemms.rfind("oneDNN (", 0) == 0)
    gemms += " where every dimension is 64 or more, OpenBLAS for the rest";
  const int block =
    models::blocked_activations() ? kernels::backend_for(kernels::device::cpu()).activation_block() : 0;
  const std::string layout = block > 0 ? "in channel blocks of " + std::to_string(block) +
                                           " between the layers that take them (a ResNet's stages), else NCHW"
                                       : "NCHW";
  const auto unavailable = kernels::cuda_unavailable();
  const std::string cuda_built = !kernels::built_with_cuda() ? "not built"
                                 : unavailable.empty()       ? "built"
                                                             : "built, but " + unavailable;
  const auto no_torch = models::torch_unavailable();
  return fmt::format("{}\nCUDA kernels: {}\nvisible CUDA devices: {}\nCPU GEMMs: {}\nCPU convolutions: {}\n"
                     "CPU activations: {}\ntorch models: {}\n",
                     version_line(), cuda_built, kernels::cuda_device_count(), gemms, kernels::onednn_conv::status(), layout,
                     no_torch.empty() ? "available (model.kind = \"torch\")" : "unavailable: " + no_torch);
}

} // namespace gradwire::scheduler
