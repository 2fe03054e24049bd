#pragma once
/// @file parallel_gemm.hpp
/// A GEMM split over a thread pool: the output is cut into one block of rows
/// per thread (of columns when there are too few rows; edges on 16-element
/// bounds) and
/// each block is an ordinary single-threaded backend GEMM. Each thread
/// writes only its block, so a weight gradient is written once in total
/// rather than once per thread (as micro-batch replicas must).

#include "kernels/backend.hpp"
#include "kernels/thread_pool.hpp"

#include <functional>

namespace gradwire::kernels {

/// Work on the block rows [r0, r1) x columns [c0, c1) of C, run by the
/// thread that just computed it (while it is in that core's cache).
using gemm_epilogue = std::function<void(int r0, int r1, int c0, int c1)>;

/// As backend::gemm; runs serially when `pool` is null, has one thread, or
/// the product is too small to be worth splitting. `epilogue`, when given,
/// is called once for each block of C (the whole of C when serial).
void parallel_gemm(backend& be, thread_pool* pool, bool trans_a, bool trans_b, int m, int n, int k,
                   float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                   float* c, int ldc, const gemm_epilogue& epilogue = {});

} // namespace gradwire::kernels
