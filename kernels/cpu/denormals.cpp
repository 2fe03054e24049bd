#include "kernels/cpu/denormals.hpp"

#include <xmmintrin.h>

namespace gradwire::kernels {

void flush_denormals_on_this_thread() {
  constexpr unsigned ftz = 0x8000, daz = 0x0040;
  _mm_setcsr(_mm_getcsr() | ftz | daz);
}

} // namespace gradwire::kernels
