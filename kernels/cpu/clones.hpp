#pragma once
/// @file clones.hpp
/// GW_CLONES: compile a function for AVX-512 and AVX2 as well as the
/// baseline (SSE2) and pick the best when the library loads (GCC's
/// target_clones), for memory-bound loops outside the per-ISA kernel files.
/// Off under sanitizers and other compilers (one baseline version).

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
  !defined(__SANITIZE_THREAD__)
#define GW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GW_CLONES
#endif
