#include "scheduler/app/config_halos.hpp"

#include "kernels/error.hpp"
#include "scheduler/runtime/halos_wiring.hpp"

#include <string>

namespace gradwire::scheduler {

using config_toml::reader;

namespace {

/// What HALoS does not run with: each named by its key.
void check_halos(reader& r, const run_config& c) {
  const auto refuse = [&](bool bad, const char* key, const std::string& why) {
    check(!bad, r.loc(key) + ": " + why + " (topology.kind = \"halos\")");
  };
  refuse(c.checkpoint_every != 0 || c.checkpoint_every_s != 0, "train.checkpoint_every",
         "HALoS does not checkpoint (a local server's exchange may be in flight); set train.checkpoint_every and "
         "checkpoint_every_s to 0");
  refuse(c.compress.mode != models::compress_mode::none, "compression.kind",
         "HALoS's pushes are dense pseudo-gradients; set compression.kind = \"none\"");
  refuse(!c.faults.empty(), "faults", "HALoS's local servers do not go on without a lost worker; remove [[faults]]");
  refuse(c.ps.python_rule(), "topology.ps.rule", "a Python rule replaces the async server's, not HALoS's local servers'");
  refuse(c.ps.staleness_lr, "topology.ps.staleness_lr", "HALoS's local servers apply every push at local_lr");
}

} // namespace

void read_halos(reader& r, run_config& c) {
  auto& h = c.halos;
  h.local_lr = static_cast<float>(r.number("topology.halos.local_lr"));
  h.local_momentum = static_cast<float>(r.number("topology.halos.local_momentum"));
  h.global_lr = static_cast<float>(r.number("topology.halos.global_lr"));
  h.global_momentum = static_cast<float>(r.number("topology.halos.global_momentum"));
  h.exchange_every = static_cast<int>(r.integer("topology.halos.exchange_every"));
  h.merge_alpha = static_cast<float>(r.number("topology.halos.merge_alpha"));
  if (c.family == &halos_family)
    check_halos(r, c);
}

} // namespace gradwire::scheduler
