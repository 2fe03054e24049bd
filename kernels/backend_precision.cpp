// A backend's default precision: fp32 only. Its own file because it is
// backend's first virtual function defined out of line, so the vtable and
// typeinfo live here, and the CUDA module needs its own copy of them.
#include "kernels/backend.hpp"
#include "kernels/error.hpp"

namespace gradwire::kernels {

void backend::set_gemm_math(gemm_math m) {
  check(m == gemm_math::fp32, "bf16 compute (train.precision = \"bf16\") runs on a GPU's Tensor Cores; " +
                                to_string(dev()) + " computes in fp32 only");
}

} // namespace gradwire::kernels
