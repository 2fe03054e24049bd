#include "scheduler/runtime/topology_registry.hpp"

#include "kernels/error.hpp"

namespace gradwire::scheduler {

// Each row lives beside its wiring.
extern const topology_family parameter_server_family;
extern const topology_family local_sgd_family;
extern const topology_family diloco_family;
extern const topology_family ring_family;
extern const topology_family hierarchical_family;
extern const topology_family gossip_family;

const std::vector<const topology_family*>& topology_families() {
  static const std::vector<const topology_family*> rows = {
    &parameter_server_family, &local_sgd_family, &diloco_family, &ring_family, &hierarchical_family, &gossip_family,
  };
  return rows;
}

const topology_family& family_of(topology_kind kind) {
  for (const auto* f : topology_families())
    if (f->kind == kind)
      return *f;
  throw error("topology kind " + std::to_string(static_cast<int>(kind)) + " has no row in the topology registry");
}

const topology_family* find_family(std::string_view name) {
  for (const auto* f : topology_families())
    if (name == f->name)
      return f;
  return nullptr;
}

std::string family_names() {
  std::string s;
  for (const auto* f : topology_families())
    s += (s.empty() ? "" : ", ") + std::string(f->name);
  return s;
}

const topology_family& family_named(std::string_view name) {
  if (const auto* f = find_family(name))
    return *f;
  throw error("unknown topology kind '" + std::string(name) + "' (known: " + family_names() + ")");
}

bool always(const topology_setup&) { return true; }
bool never(const topology_setup&) { return false; }
std::int64_t every_step(const topology_setup&) { return 1; }

} // namespace gradwire::scheduler
