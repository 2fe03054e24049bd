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

#include <cstddef>

namespace gradwire::transport::comm_algorithms {

inline void add(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    dst[i] += src[i];
}

/// Recursive doubling; the ranks beyond the largest power of two fold
/// into a partner first (MPICH's scheme). Partners add each other's
/// sums, and a + b == b + a: every rank ends with the same bits.
template <typename X> void recursive_doubling(X& x, int rank, int size, float* data, std::size_t n, float* tmp) {
  int pof2 = 1;
  while (pof2 * 2 <= size)
    pof2 *= 2;
  const int rem = size - pof2;
  int step = 0;
  int newrank;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) { // folded into rank + 1, which hands back the result at the end
      x.send_only(rank + 1, data, n, step);
      newrank = -1;
    } else {
      x.recv_only(rank - 1, tmp, n, step, data);
      newrank = rank / 2;
    }
  } else {
    newrank = rank - rem;
  }
  ++step;
  if (newrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1, ++step) {
      const int newdst = newrank ^ mask;
      const int dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
      x.sendrecv(dst, data, n, dst, tmp, n, step);
      add(data, tmp, n);
    }
  } else {
    step += __builtin_ctz(static_cast<unsigned>(pof2));
  }
  if (rank < 2 * rem) {
    if (rank % 2 == 1)
      x.send_only(rank - 1, data, n, step);
    else
      x.recv_only(rank + 1, data, n, step);
  }
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
