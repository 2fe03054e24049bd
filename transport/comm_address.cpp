#include "transport/comm_address.hpp"

#include "kernels/error.hpp"
#include "transport/ucx_setup.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

namespace gradwire::transport {

allreduce_algo parse_allreduce_algo(const std::string& text, const std::string& what) {
  if (text == "auto")
    return allreduce_algo::automatic;
  if (text == "rd" || text == "recursive-doubling")
    return allreduce_algo::recursive_doubling;
  if (text == "ring")
    return allreduce_algo::ring;
  if (text == "rabenseifner")
    return allreduce_algo::halving_doubling;
  if (text == "shm")
    return allreduce_algo::shared_memory;
  if (text == "hier" || text == "hierarchical")
    return allreduce_algo::hierarchical;
  throw error(what + " '" + text + "': expected auto, rd (recursive doubling), ring, rabenseifner, shm or hier");
}

const char* to_string(allreduce_algo a) {
  switch (a) {
  case allreduce_algo::automatic: return "auto";
  case allreduce_algo::recursive_doubling: return "recursive doubling";
  case allreduce_algo::ring: return "ring";
  case allreduce_algo::halving_doubling: return "Rabenseifner";
  case allreduce_algo::shared_memory: return "shared memory";
  case allreduce_algo::hierarchical: return "hierarchical";
  }
  return "?";
}

comm_net parse_comm_net(const std::string& text, const std::string& what) {
  if (text == "auto")
    return comm_net::automatic;
  if (text == "ucx")
    return comm_net::ucx;
  if (text == "sockets")
    return comm_net::sockets;
  throw error(what + " '" + text + "': expected auto, ucx or sockets");
}

std::vector<std::uint8_t> with_collective(const std::vector<std::uint8_t>& link_address,
                                          const std::vector<std::uint8_t>& comm_address) {
  auto a = ucx_setup::unpack(link_address, -1);
  a.collective = comm_address;
  return ucx_setup::pack(a);
}

collective_peer collective_of(const std::vector<std::uint8_t>& address, int rank) {
  auto a = ucx_setup::unpack(address, rank);
  const bool same = a.host == ucx_setup::host_identity();
  return {std::move(a.collective), same, std::move(a.host)};
}

const char* to_string(comm_net n) {
  switch (n) {
  case comm_net::automatic: return "auto";
  case comm_net::ucx: return "ucx";
  case comm_net::sockets: return "sockets";
  }
  return "?";
}

namespace comm_detail {

namespace {
constexpr std::uint64_t comm_magic = 0x474d4d4f43574732ull; // "2GWCOMMG"

void put_blob(std::vector<std::uint8_t>& out, const std::vector<std::uint8_t>& b) {
  const auto n = static_cast<std::uint32_t>(b.size());
  const auto at = out.size();
  out.resize(at + 4 + b.size());
  std::memcpy(out.data() + at, &n, 4);
  if (n)
    std::memcpy(out.data() + at + 4, b.data(), n);
}

bool has_rdma_device() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}
} // namespace

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= text.size();) {
    const auto comma = std::min(text.find(',', at), text.size());
    if (comma > at)
      out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::vector<std::uint8_t> pack(const comm_address& a) {
  std::vector<std::uint8_t> out(8);
  std::memcpy(out.data(), &comm_magic, 8);
  put_blob(out, a.here);
  put_blob(out, a.away);
  put_blob(out, a.lanes);
  put_blob(out, std::vector<std::uint8_t>(a.segment.begin(), a.segment.end()));
  return out;
}

comm_address unpack(const std::vector<std::uint8_t>& in, int rank) {
  const std::string who = "collective communicator: rank " + std::to_string(rank) + "'s address";
  std::size_t at = 0;
  std::uint64_t magic = 0;
  check(in.size() >= 8, who + " is truncated");
  std::memcpy(&magic, in.data(), 8);
  check(magic == comm_magic, who + " is not a communicator address");
  at = 8;
  auto take = [&] {
    std::uint32_t n = 0;
    check(in.size() - at >= 4, who + " is truncated");
    std::memcpy(&n, in.data() + at, 4);
    at += 4;
    check(n <= in.size() - at, who + " is truncated");
    std::vector<std::uint8_t> b(in.begin() + static_cast<std::ptrdiff_t>(at),
                                in.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    return b;
  };
  comm_address a;
  a.here = take();
  a.away = take();
  a.lanes = take();
  const auto segment = take();
  a.segment.assign(segment.begin(), segment.end());
  check(at == in.size(), who + " has trailing bytes");
  return a;
}

/// The transports less CMA: UCX 1.13's CMA aborts the process (ucs_fatal
/// on process_vm_readv's ESRCH) when the peer it reads from has died,
/// and without peer error handling (which rules out shared memory) nothing
/// catches it. A dead peer must be an error naming it, never a crash.
std::string without_cma(const std::string& tls) {
  if (tls.empty())
    return "^cma";
  if (tls[0] == '^')
    return tls + ",cma";
  std::string out;
  for (const auto& item : split_list(tls))
    if (item != "cma")
      out += (out.empty() ? "" : ",") + item;
  return out.empty() ? "^cma" : out;
}

bool by_lane(comm_net net, const std::string& tls, bool same_host) {
  if (net != comm_net::automatic)
    return net == comm_net::sockets;
  static const std::vector<std::string> shm = {"self", "posix", "sysv", "shm", "mm", "cma", "knem", "xpmem", "sm"};
  const bool explicit_list = !tls.empty() && tls[0] != '^';
  bool tcp = false, other = false, shared = false;
  for (const auto& it : explicit_list ? split_list(tls) : std::vector<std::string>{}) {
    if (it == "tcp")
      tcp = true;
    else if (std::find(shm.begin(), shm.end(), it) != shm.end())
      shared = shared || it != "self";
    else
      other = true;
  }
  if (same_host) // one host: lanes only when TCP is all that was asked for
    return explicit_list && tcp && !other && !shared;
  if (explicit_list)
    return tcp && !other;
  return !has_rdma_device();
}

} // namespace comm_detail
} // namespace gradwire::transport
