#include "transport/comm_hosts.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <map>
#include <string>

namespace gradwire::transport::comm_detail {

host_layout layout_of(const std::vector<int>& host_of, int rank) {
  check(rank >= 0 && static_cast<std::size_t>(rank) < host_of.size(),
        "collective communicator: rank " + std::to_string(rank) + " of " + std::to_string(host_of.size()));
  // Hosts in the order of their lowest rank; each host's ranks ascending.
  std::map<int, std::size_t> index_of;
  std::vector<std::vector<int>> hosts;
  for (std::size_t r = 0; r < host_of.size(); ++r) {
    auto [it, fresh] = index_of.emplace(host_of[r], hosts.size());
    if (fresh)
      hosts.emplace_back();
    hosts[it->second].push_back(static_cast<int>(r));
  }
  host_layout out;
  out.hosts = static_cast<int>(hosts.size());
  out.host_index = static_cast<int>(index_of.at(host_of[static_cast<std::size_t>(rank)]));
  out.local = hosts[static_cast<std::size_t>(out.host_index)];
  for (std::size_t i = 0; i < out.local.size(); ++i)
    if (out.local[i] == rank)
      out.local_index = static_cast<int>(i);
  out.owners = static_cast<int>(out.local.size());
  for (const auto& h : hosts) {
    out.owners = std::min(out.owners, static_cast<int>(h.size()));
    out.largest = std::max(out.largest, static_cast<int>(h.size()));
  }
  out.uniform = out.owners == out.largest;
  if (out.local_index < out.owners)
    for (const auto& h : hosts)
      out.across.push_back(h[static_cast<std::size_t>(out.local_index)]);
  return out;
}

} // namespace gradwire::transport::comm_detail
