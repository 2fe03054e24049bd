#include "scheduler/app/config_sweep.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/config_renamed.hpp"
#include "scheduler/app/config_schema.hpp"
#include "scheduler/app/config_toml.hpp"
#include "scheduler/app/config_torch.hpp"

#include <algorithm>
#include <sstream>

namespace gradwire::scheduler {

using config_toml::for_each_leaf;
using config_toml::where;

namespace {

std::string toml_text(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](const auto& x) { os << x; });
  return os.str();
}

/// A key of a [sweep] or [sweep.variants] entry must be a config key; a
/// renamed one is taken under its new name.
std::string checked_key(const std::string& source, const std::string& given, const toml::node& at,
                        const std::string& what) {
  const auto place = what.back() == ':' ? what.substr(0, what.size() - 1) : what;
  const auto key = current_key(given, where(source, at) + ": " + place);
  if (find_key(key) || is_free_form_key(key))
    return key;
  std::vector<std::string> all;
  for (const auto& s : config_schema())
    all.push_back(s.key);
  auto near = nearest_of(key, all);
  throw error(where(source, at) + ": " + what + " unknown key '" + key + "'" +
              (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

/// `axes` in the order of their lines in the file (toml++ keeps keys sorted).
sweep_axes in_file_order(sweep_axes axes, const std::vector<std::uint32_t>& lines) {
  std::vector<std::pair<std::uint32_t, std::size_t>> order;
  for (std::size_t i = 0; i < axes.size(); ++i)
    order.emplace_back(lines[i], i);
  std::sort(order.begin(), order.end());
  sweep_axes sorted;
  for (const auto& [line, i] : order)
    sorted.push_back(std::move(axes[i]));
  return sorted;
}

/// [sweep]'s entry `name`, or null (no [sweep] table, or no such entry).
toml::node* sweep_entry(toml::table& root, const char* name) {
  auto* sw = root.get("sweep");
  return sw && sw->is_table() ? sw->as_table()->get(name) : nullptr;
}

/// [sweep.variants]: "label" = { "key" = value, ... }, keys that change
/// together, in file order; taken out of the table.
sweep_axes take_variants(toml::table& root, const std::string& source) {
  sweep_axes variants;
  std::vector<std::uint32_t> variant_lines;
  auto* vs = sweep_entry(root, "variants");
  if (!vs)
    return variants;
  // "label" = { "topology.kind" = "...", "topology.ps.mode" = "..." }: keys that change together.
  check(vs->is_table() && !vs->as_table()->empty(),
        where(source, *vs) + ": write [sweep.variants] as \"label\" = { \"key\" = value, ... }");
  for (const auto& [label, v] : *vs->as_table()) {
    check(v.is_table(), where(source, v) + ": [sweep.variants] " + std::string(label.str()) +
                          " must be a table of \"key\" = value");
    std::vector<std::string> sets;
    const std::string in_variant = "[sweep.variants] " + std::string(label.str()) + ":";
    for_each_leaf(*v.as_table(), [&](const std::string& key, const toml::node& x) {
      sets.push_back(checked_key(source, key, x, in_variant) + "=" + toml_text(x));
    });
    check(!sets.empty(), where(source, v) + ": [sweep.variants] " + std::string(label.str()) + " sets no key");
    variants.emplace_back(std::string(label.str()), std::move(sets));
    variant_lines.push_back(v.source().begin.line);
  }
  root["sweep"].as_table()->erase("variants");
  return in_file_order(std::move(variants), variant_lines);
}

/// [sweep]: "key" = [values], a grid for `gradwire run`, in file order;
/// taken out of the table.
sweep_axes take_grid(toml::table& root, const std::string& source) {
  sweep_axes sweep;
  if (auto* sw = root.get("sweep")) {
    check(sw->is_table(), where(source, *sw) + ": write [sweep] as a table of \"key\" = [values]");
    std::vector<std::uint32_t> lines;
    for_each_leaf(*sw->as_table(), [&](const std::string& key, const toml::node& v) {
      const auto* arr = v.as_array();
      check(arr != nullptr && !arr->empty(), where(source, v) + ": [sweep] " + key + " must be a non-empty array of values");
      const auto now = checked_key(source, key, v, "[sweep]");
      std::vector<std::string> values;
      for (const auto& e : *arr)
        values.push_back(toml_text(e));
      lines.push_back(v.source().begin.line);
      sweep.emplace_back(now, std::move(values));
    });
    sweep = in_file_order(std::move(sweep), lines);
    root.erase("sweep");
  }
  return sweep;
}

/// [sweep] paired = true (a switch, not an axis); taken out of the table.
bool take_paired(toml::table& root, const std::string& source) {
  auto* p = sweep_entry(root, "paired");
  if (!p)
    return false;
  check(p->is_boolean(), where(source, *p) + ": [sweep] paired must be true or false");
  const bool on = p->as_boolean()->get();
  root["sweep"].as_table()->erase("paired");
  return on;
}

} // namespace

sweep_section take_sweep(toml::table& root, const std::string& source) {
  sweep_section s;
  s.paired = take_paired(root, source);
  s.variants = take_variants(root, source);
  s.grid = take_grid(root, source);
  check(!s.paired || s.variants.size() >= 2,
        source + ": [sweep] paired = true replays each variant after the first on the first's schedule: give at "
                 "least two [sweep.variants]");
  return s;
}

} // namespace gradwire::scheduler
