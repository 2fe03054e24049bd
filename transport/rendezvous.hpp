#pragma once
/// @file rendezvous.hpp
/// Bootstrap: every process of a job sends its UCX worker address to rank
/// 0 over TCP (host:port as torchrun's MASTER_ADDR/MASTER_PORT), which
/// answers everyone with the full table once all have arrived. A process
/// must present the job token or rank 0 refuses it (and keeps waiting for
/// the right one); ranks out of range, duplicates and a size that differs
/// from rank 0's are refused likewise. Every wait is bounded by timeout_ms
/// and a timeout names the ranks still missing.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradwire::transport {

struct rendezvous_options {
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string token;
  int timeout_ms = 60000;
  /// Rank 0: why a joining rank's address is unusable ("" if it is fine);
  /// such a hello is refused, and the real rank may still join.
  std::function<std::string(const std::vector<std::uint8_t>&)> check_address;
};

/// Returns every rank's blob, indexed by rank. Throws gradwire::error.
std::vector<std::vector<std::uint8_t>> rendezvous(int rank, int size, const rendezvous_options& opts,
                                                   const std::vector<std::uint8_t>& mine);

} // namespace gradwire::transport
