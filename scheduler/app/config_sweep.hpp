#pragma once
/// @file config_sweep.hpp
/// A config's [sweep] section, kept apart from the run's own keys: the
/// grid ("key" = [values]), the variants ([sweep.variants]: "label" =
/// { "key" = value, ... }, keys that change together) and `paired`.

#include <toml++/toml.h>

#include <string>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

using sweep_axes = std::vector<std::pair<std::string, std::vector<std::string>>>;

struct sweep_section {
  sweep_axes grid;     ///< key, values as TOML text, in file order
  sweep_axes variants; ///< label, "key=value" sets, in file order
  /// [sweep] paired = true: each variant after the first also runs as a
  /// replay of the first's run (`gradwire replay`), on its schedule.
  bool paired = false;
};

/// Takes [sweep] out of `root` (`source` names the file in errors): every
/// key must be a config key, every grid entry a non-empty array.
sweep_section take_sweep(toml::table& root, const std::string& source);

} // namespace gradwire::scheduler
