#pragma once
/// @file halos_rule.hpp
/// HALoS's local parameter server (Kim et al., ICML 2025) as a server
/// rule: a shard of one group's local server, which applies each of its
/// workers' pseudo-gradients as it comes through its own Nesterov step,
/// and every exchange_every of them sends its progress since its last
/// merge to the global server's shard of the same range, without holding
/// its workers. The global shard is a plain async DiLoCo shard whose
/// "workers" are the groups; its answer is merged as
///   local += merge_alpha x (global - local at the send),
/// which keeps the progress made while the exchange was in flight, and the
/// next progress is counted from the merged send point
///   base = sent + merge_alpha x (global - sent).
/// With one group, exchange_every 1, global_lr 1 and global_momentum 0 the
/// global server only mirrors the local one: async DiLoCo at local_lr and
/// local_momentum, to rounding (tests/actors/test_halos.cpp).

#include "actors/server_rule.hpp"
#include "actors/shard_protocol.hpp"
#include "actors/topology_options.hpp"

#include <caf/all.hpp>

#include <memory>

namespace gradwire::actors {

/// A local server's shard's way up: the global shard of its range (a
/// placed handle in virtual time), the group it pushes as, and how long
/// an exchange may take before the shard fails naming it.
struct halos_link {
  shard_actor global;
  int group = 0;
  caf::timespan timeout = std::chrono::seconds(60);
};

/// The rule of a local server's shard over `len` parameters starting as `initial`.
std::unique_ptr<shard_detail::server_rule> make_halos_rule(const halos_options& o, halos_link up, std::size_t len,
                                                           const slice& initial);

} // namespace gradwire::actors
