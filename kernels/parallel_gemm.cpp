#include "kernels/parallel_gemm.hpp"

#include <algorithm>

namespace gradwire::kernels {

void parallel_gemm(backend& be, thread_pool* pool, bool trans_a, bool trans_b, int m, int n, int k,
                   float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                   float* c, int ldc, const gemm_epilogue& epilogue) {
  constexpr double min_flops_per_thread = 2e5; // below this a fork-join costs more than it saves
  const int threads = pool == nullptr ? 1 : static_cast<int>(pool->size());
  const double flops = 2.0 * m * n * k;
  // Row blocks of C are contiguous; column blocks interleave the threads'
  // writes in every row, which hurts when C is the largest matrix (the
  // MLP's weight gradient). Otherwise split so that the larger input is
  // partitioned rather than read by every thread (row blocks share B,
  // column blocks share A). Both rules were timed on the MLP's GEMMs
  // (bench/RESULTS.md, "Figures behind the code").
  const double size_a = 1.0 * m * k, size_b = 1.0 * k * n, size_c = 1.0 * m * n;
  const bool split_rows = (size_c >= size_a && size_c >= size_b) ? (m >= 16 * threads || m >= n) : size_a >= size_b;
  const int extent = split_rows ? m : n;
  const int parts = std::min({threads, extent / 16, static_cast<int>(flops / min_flops_per_thread)});
  if (parts <= 1) {
    be.gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (epilogue)
      epilogue(0, m, 0, n);
    return;
  }
  pool->run(static_cast<std::size_t>(parts), [&](std::size_t t) {
    const int lo = static_cast<int>(static_cast<long>(extent) * static_cast<long>(t) / parts) / 16 * 16;
    const int hi = t + 1 == static_cast<std::size_t>(parts)
                     ? extent
                     : static_cast<int>(static_cast<long>(extent) * static_cast<long>(t + 1) / parts) / 16 * 16;
    if (hi <= lo)
      return;
    if (split_rows) {
      // Rows lo..hi of C and of op(A): A is [m, k] (offset by rows) or [k, m] (by columns).
      const float* a_blk = trans_a ? a + lo : a + static_cast<std::ptrdiff_t>(lo) * lda;
      be.gemm(trans_a, trans_b, hi - lo, n, k, alpha, a_blk, lda, b, ldb, beta,
              c + static_cast<std::ptrdiff_t>(lo) * ldc, ldc);
      if (epilogue)
        epilogue(lo, hi, 0, n);
    } else {
      // Columns lo..hi of C and of op(B): B is [k, n] (offset by columns) or [n, k] (by rows).
      const float* b_blk = trans_b ? b + static_cast<std::ptrdiff_t>(lo) * ldb : b + lo;
      be.gemm(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, b_blk, ldb, beta, c + lo, ldc);
      if (epilogue)
        epilogue(0, m, lo, hi);
    }
  });
}

} // namespace gradwire::kernels
