#pragma once
/// @file bench_allreduce.hpp
/// `gradwire bench allreduce`, in the manner of nccl-tests, across the
/// processes of a job over UCX. Two engines, side by side in one run:
/// - the headline, MPI_Allreduce's semantics: the collective communicator
///   (transport::ucx_comm), driven by the calling thread, leaves the sum in
///   each rank's own buffer, every byte copied;
/// - an extra, labelled column: the ring allreduce of actors/ (the ring
///   peers training uses), whose results are read where they lie, by
///   reference into the owner's shared memory on one host (zero-copy).
/// For each size from min to max (times factor), each engine: one check
/// round on inputs whose sum is known exactly (rank r holds (r+1)·(i mod
/// 13 + 1): the sum is n(n+1)/2·(i mod 13 + 1)), then warm-up and timed
/// rounds. Rank 0 prints size, time, algbw = bytes/time and busbw =
/// algbw·2(n-1)/n, and the check.

#include "scheduler/runtime/job.hpp"

#include <cstddef>
#include <string>

namespace gradwire::scheduler {

struct allreduce_bench_options {
  std::size_t min_bytes = std::size_t{1} << 10;
  std::size_t max_bytes = std::size_t{64} << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  std::size_t chunk_bytes = std::size_t{1} << 20; ///< pipelining unit of the ring
  /// "ring", "direct" (chunks straight to their owners and back:
  /// ring_allreduce::set_direct) or "auto" (direct below direct_below
  /// bytes on more than 2 processes, where ring hops are latency-bound).
  std::string algo = "auto";
  std::size_t direct_below = std::size_t{16} << 20;
  /// "both" (default: the communicator, then the actors' column), "comm" or "actors".
  std::string engine = "both";
  /// The communicator's algorithm: "auto", "rd" or "ring" (transport::parse_allreduce_algo).
  std::string comm_algo = "auto";
  std::size_t ring_from_bytes = 0; ///< transport::comm_options::ring_from_bytes (0: by path)
  job_options job = [] {
    job_options j;
    j.spin_us = -1; // auto: 1000 us when every rank has a CPU of its own, else 3000 us yielding the CPU
    j.shm_refs = true;
    return j;
  }();
};

/// Runs in this process as one rank of the job; returns the exit status.
int bench_allreduce(const allreduce_bench_options& opts);

/// "256K", "4M", "1G", "1000" -> bytes. Throws gradwire::error naming `what`.
std::size_t parse_bytes(const std::string& text, const std::string& what);

} // namespace gradwire::scheduler
