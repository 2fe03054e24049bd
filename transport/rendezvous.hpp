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
#include <memory>
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
  /// Rank 0: the listening socket stays open and its descriptor is stored
  /// here (the caller's to close, or to hand to late_joins).
  int* keep_listener = nullptr;
  /// A process that replaces a lost rank (GRADWIRE_REJOIN): rank 0 has been
  /// listening since the job began, so a refused connection means the job
  /// is over; no retries.
  bool late = false;
};

/// Returns every rank's blob, indexed by rank. Throws gradwire::error.
std::vector<std::vector<std::uint8_t>> rendezvous(int rank, int size, const rendezvous_options& opts,
                                                   const std::vector<std::uint8_t>& mine);

/// Rank 0 after the rendezvous, on the same socket: a process started
/// again for a lost rank (same token, size and rank) says the same hello
/// and gets the table back, its own slot updated. `admit` decides: ""
/// admits it (and must have made the job reach the new process before it
/// returns); a reason that starts with "later: " keeps it waiting, up to
/// 10 s (rank 0 may not have noticed the old process is gone yet); any
/// other reason refuses it. Each hello is read on its own thread with its
/// own deadline; finished ones are joined as it goes.
class late_joins {
public:
  using admit_fn = std::function<std::string(int rank, const std::vector<std::uint8_t>& address)>;
  late_joins(int listener, rendezvous_options opts, int size, std::vector<std::vector<std::uint8_t>> table,
             admit_fn admit);
  ~late_joins();
  late_joins(const late_joins&) = delete;
  late_joins& operator=(const late_joins&) = delete;

private:
  struct impl;
  std::unique_ptr<impl> p_;
};

} // namespace gradwire::transport
