// Direct convolution kernels for AVX-512F (compiled with -mavx512f -mfma).
#define GW_ISA avx512
#define GW_LANES 16
#define GW_MAX_REGS 2
#define GW_ACC_REGS 16
#define GW_WGRAD_MB 4
#define GW_WGRAD_ST 5
#define GW_CW_ACC 28
#define GW_CC_ACC 16
#include "kernels/cpu/direct_conv_isa.hpp"

namespace gradwire::kernels::direct_conv {
const isa_kernels* avx512_kernels() { return avx512::kernels(); }
} // namespace gradwire::kernels::direct_conv
