// Direct convolution kernels for AVX2 with FMA (compiled with -mavx2 -mfma).
#define GW_ISA avx2
#define GW_LANES 8
#define GW_MAX_REGS 4
#define GW_ACC_REGS 10
#define GW_WGRAD_MB 2
#define GW_WGRAD_ST 5
#define GW_CW_ACC 12
#define GW_CC_ACC 8
#include "kernels/cpu/direct_conv_isa.hpp"

namespace gradwire::kernels::direct_conv {
const isa_kernels* avx2_kernels() { return avx2::kernels(); }
} // namespace gradwire::kernels::direct_conv
