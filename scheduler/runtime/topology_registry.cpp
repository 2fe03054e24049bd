#include "scheduler/runtime/topology_registry.hpp"

#include "kernels/error.hpp"

#include <algorithm>

namespace gradwire::scheduler {

namespace {

std::vector<const topology_family*>& registered() {
  static std::vector<const topology_family*> rows;
  return rows;
}

} // namespace

family_registration::family_registration(const topology_family& row) {
  auto& rows = registered();
  const auto at = std::find_if(rows.begin(), rows.end(), [&](const auto* f) { return f->order > row.order; });
  rows.insert(at, &row);
}

const std::vector<const topology_family*>& topology_families() { return registered(); }

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
