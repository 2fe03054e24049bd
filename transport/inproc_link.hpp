#pragma once
/// @file inproc_link.hpp
/// The link between "processes" that are threads of one process: for
/// tests of everything above the link (codec, proxies, the actors across a
/// process boundary) without UCX. Frames are copied as a wire would copy
/// them, delivered in order on one receive thread per rank. inject() hands
/// a rank raw bytes, as a misbehaving peer would.

#include "transport/buffer_pool.hpp"
#include "transport/link.hpp"

#include <memory>
#include <vector>

namespace gradwire::transport {

class inproc_hub;

class inproc_link final : public link {
public:
  /// `n` connected links, one per rank.
  static std::vector<std::unique_ptr<inproc_link>> make_group(int n);
  ~inproc_link() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void start(handlers h) override;
  void send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool may_reference = false) override;
  void close(int timeout_ms) override;
  std::string describe() const override { return "inproc"; }

  /// Delivers raw bytes to this rank as if a peer had sent them.
  void inject(const void* header, std::size_t header_bytes, kernels::tensor data);
  /// Makes every later send to or from `peer` fail as a dead peer would.
  void kill_peer(int peer);

  inproc_link(std::shared_ptr<inproc_hub> hub, int rank, int size);

private:
  std::shared_ptr<inproc_hub> hub_;
  int rank_, size_;
};

} // namespace gradwire::transport
