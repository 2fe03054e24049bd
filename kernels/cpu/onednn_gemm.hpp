#pragma once
/// @file onednn_gemm.hpp
/// oneDNN's sgemm (what PyTorch and TensorFlow use on CPU), opened at run
/// time from libdnnl.so when the machine has it: no build dependency, and a
/// machine without it keeps OpenBLAS for every GEMM. Which GEMMs go to it is
/// a fixed rule by shape (gemm_choice), never a timing taken during a run,
/// so a run's bits do not depend on the machine's load. Each call runs on
/// the calling thread alone (its OpenMP team set to 1 there): gradwire's own
/// thread pool splits the work (parallel_gemm).

#include <string>

namespace gradwire::kernels {

/// Whether the automatic rule may pick oneDNN. Not in an ASan build: LSan's
/// exit-time check crashed walking a process in which the uninstrumented
/// library had run from a worker's thread pool (the sanitizers check
/// gradwire's code; "gemm: every shape through onednn" still forces it there).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool onednn_in_auto = false;
#else
inline constexpr bool onednn_in_auto = true;
#endif

/// GRADWIRE_GEMM: "openblas" (every GEMM), "onednn" (every GEMM, when the
/// library is there), or "auto" / unset (the measured rule below).
enum class gemm_library { openblas, onednn };

/// Where C[m,n] = op(A) op(B) goes: oneDNN only where it was measured
/// faster (bench/gemm_libs.cpp, bench/RESULTS.md) and present.
gemm_library gemm_choice(bool trans_a, bool trans_b, int m, int n, int k);

/// oneDNN's row-major sgemm; false when the library is missing or failed
/// (the caller then uses OpenBLAS).
bool onednn_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc);

/// "oneDNN 2.6 (libdnnl.so.2)" or why not, for logs and the bench.
std::string onednn_status();

} // namespace gradwire::kernels
