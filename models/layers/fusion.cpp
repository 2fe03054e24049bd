// Each linear or batchnorm2d fused with the relu right after it.
#include "models/layers/layers.hpp"

namespace gradwire::models {

namespace {
bool g_bn_relu_fusion = true;
} // namespace

void set_batchnorm_relu_fusion(bool on) { g_bn_relu_fusion = on; }

void fuse_activations(std::vector<std::unique_ptr<layer>>& layers) {
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
    auto* act = dynamic_cast<relu*>(layers[i + 1].get());
    if (act == nullptr)
      continue;
    if (auto* lin = dynamic_cast<linear*>(layers[i].get())) {
      lin->fuse_relu();
      act->input_rectified();
    } else if (auto* bn = dynamic_cast<batchnorm2d*>(layers[i].get()); bn != nullptr && g_bn_relu_fusion) {
      bn->fuse_relu();
      act->folded_into_previous();
    }
  }
}

} // namespace gradwire::models
