#pragma once
/// @file comm_algorithms.hpp
/// The collective communicator's allreduce algorithms, over any
/// point-to-point layer X that offers, with float counts and a step number
/// that numbers the algorithm's exchanges:
///   x.sendrecv(to, send, send_n, from, recv, recv_n, step, into = nullptr)
///   x.send_only(to, send, n, step)
///   x.recv_only(from, recv, n, step, into = nullptr)
/// where `into`, when given, receives the sum of itself and what arrives
/// (recv is then scratch). ucx_comm is that layer over UCX and its TCP
/// lanes; the algorithms know nothing of either. `tmp` holds n floats.

#include <algorithm>
#include <cstddef>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gradwire::transport::comm_algorithms {

inline void add(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    dst[i] += src[i];
}

/// Copies n floats. Not memcpy: glibc 2.36 moves 8-256 KiB with `rep
/// movsb`, which on the AMD EPYC measured wrote a destination 16 bytes
/// past a cache line (a malloc'd buffer, as callers' often are) at 2 GB/s,
/// against 36-44 GB/s for this loop (bench/RESULTS.md).
inline void copy(float* dst, const float* src, std::size_t n) {
#if defined(__SSE2__)
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128 a = _mm_loadu_ps(src + i), b = _mm_loadu_ps(src + i + 4), c = _mm_loadu_ps(src + i + 8),
                 d = _mm_loadu_ps(src + i + 12);
    _mm_storeu_ps(dst + i, a);
    _mm_storeu_ps(dst + i + 4, b);
    _mm_storeu_ps(dst + i + 8, c);
    _mm_storeu_ps(dst + i + 12, d);
  }
  for (; i < n; ++i)
    dst[i] = src[i];
#else
  std::memcpy(dst, src, n * sizeof(float));
#endif
}

/// MPICH's folding for algorithms among a power of two of ranks: with p
/// the largest power of two <= size and rem = size - p, each even rank
/// below 2 rem sends its data to the next rank at step 0 and sits out,
/// that rank adds it; the p ranks left are renumbered 0 .. p-1 (real()).
/// body(newrank, p, real) runs on those, numbering its steps from 1, and
/// takes `rounds` of them (a folded rank skips them); then the folded ranks
/// get the result back at step rounds + 1.
template <typename X, typename Body>
void folded(X& x, int rank, int size, float* data, std::size_t n, float* tmp, int rounds, Body body) {
  int pof2 = 1;
  while (pof2 * 2 <= size)
    pof2 *= 2;
  const int rem = size - pof2;
  const bool folds = rank < 2 * rem;
  if (folds && rank % 2 == 0)
    x.send_only(rank + 1, data, n, 0);
  else if (folds)
    x.recv_only(rank - 1, tmp, n, 0, data);
  if (!folds || rank % 2 == 1)
    body(folds ? rank / 2 : rank - rem, pof2, [rem](int nr) { return nr < rem ? nr * 2 + 1 : nr + rem; });
  const int last = 1 + rounds;
  if (folds && rank % 2 == 1)
    x.send_only(rank - 1, data, n, last);
  else if (folds)
    x.recv_only(rank + 1, data, n, last);
}

inline int log2_pof2(int size) {
  int r = 0;
  while ((2 << r) <= size)
    ++r;
  return r;
}

/// Recursive doubling; the ranks beyond the largest power of two fold
/// into a partner first (MPICH's scheme). Partners add each other's
/// sums, and a + b == b + a: every rank ends with the same bits.
template <typename X> void recursive_doubling(X& x, int rank, int size, float* data, std::size_t n, float* tmp) {
  folded(x, rank, size, data, n, tmp, log2_pof2(size), [&](int newrank, int pof2, auto real) {
    int step = 1;
    for (int mask = 1; mask < pof2; mask <<= 1, ++step) {
      const int dst = real(newrank ^ mask);
      x.sendrecv(dst, data, n, dst, tmp, n, step);
      add(data, tmp, n);
    }
  });
}

/// Rabenseifner's: a reduce-scatter by recursive halving, then an
/// all-gather by recursive doubling, among the largest power of two of
/// ranks (the others fold in first and get the result back last, as in
/// recursive_doubling). The ring's bytes in 2 log2(p) steps instead of
/// 2 (p - 1): MPICH's choice for long messages. Segment s's sum is made
/// once, by the rank that ends owning it, and copied: every rank ends
/// with the same bits. Needs n >= the power of two.
template <typename X> void halving_doubling(X& x, int rank, int size, float* data, std::size_t n, float* tmp) {
  folded(x, rank, size, data, n, tmp, 2 * log2_pof2(size), [&](int newrank, int pof2, auto real) {
    const auto p = static_cast<std::size_t>(pof2);
    auto at = [&](int s) { return n * static_cast<std::size_t>(s) / p; }; // segment s starts here
    int step = 1;
    // [lo, hi): the segments this rank is still reducing; each round keeps half.
    int lo = 0, hi = pof2;
    for (int mask = pof2 / 2; mask >= 1; mask /= 2, ++step) {
      const int dst = real(newrank ^ mask);
      const int mid = lo + (hi - lo) / 2;
      const bool keep_low = (newrank & mask) == 0;
      const int send_lo = keep_low ? mid : lo, send_hi = keep_low ? hi : mid;
      const int keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
      x.sendrecv(dst, data + at(send_lo), at(send_hi) - at(send_lo), dst, tmp, at(keep_hi) - at(keep_lo), step,
                 data + at(keep_lo));
      lo = keep_lo;
      hi = keep_hi;
    }
    for (int mask = 1; mask < pof2; mask *= 2, ++step) { // the same pairs backwards: each doubles what it holds
      const int dst = real(newrank ^ mask);
      const int width = hi - lo;
      const bool low = (newrank & mask) == 0;
      const int got_lo = low ? hi : lo - width, got_hi = low ? hi + width : lo;
      x.sendrecv(dst, data + at(lo), at(hi) - at(lo), dst, data + at(got_lo), at(got_hi) - at(got_lo), step);
      lo = std::min(lo, got_lo);
      hi = std::max(hi, got_hi);
    }
  });
}

/// Ring reduce-scatter then all-gather; segment s's sum is made once, by
/// its owner, and copied: every rank ends with the same bits.
template <typename X> void ring(X& x, int rank, int size, float* data, std::size_t n, float* tmp) {
  const auto p = static_cast<std::size_t>(size);
  auto begin = [&](std::size_t s) { return n * s / p; };
  auto len = [&](std::size_t s) { return begin(s + 1) - begin(s); };
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  const auto r = static_cast<std::size_t>(rank);
  int step = 0;
  for (std::size_t k = 0; k + 1 < p; ++k, ++step) {
    const std::size_t out = (r + p - k) % p, in = (r + 2 * p - k - 1) % p;
    // Segments out and in are disjoint: what arrives is added as it lands.
    x.sendrecv(right, data + begin(out), len(out), left, tmp, len(in), step, data + begin(in));
  }
  for (std::size_t k = 0; k + 1 < p; ++k, ++step) {
    const std::size_t out = (r + 1 + p - k) % p, in = (r + p - k) % p;
    x.sendrecv(right, data + begin(out), len(out), left, data + begin(in), len(in), step);
  }
}

} // namespace gradwire::transport::comm_algorithms
