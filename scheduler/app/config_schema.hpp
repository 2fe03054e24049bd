#pragma once
/// @file config_schema.hpp
/// Every config key gradwire knows: its type, default, allowed values and a
/// one-line description. The parser rejects anything not listed here and
/// `gradwire keys` prints this table, so it is the single source of truth.

#include <string>
#include <vector>

namespace gradwire::scheduler {

enum class value_type { string, integer, number, boolean, int_list, number_list };

struct key_spec {
  std::string key;                  ///< dotted path, e.g. "train.lr"
  value_type type;
  std::string default_value;        ///< as TOML text
  std::vector<std::string> allowed; ///< for strings: the accepted values (empty = any)
  std::string doc;
};

const std::vector<key_spec>& config_schema();
const key_spec* find_key(const std::string& key);
std::string to_string(value_type t);

/// The known key closest to `key` by edit distance (empty if none is close).
std::string nearest_key(const std::string& key);
/// The closest of `options` to `value` (empty if none is close).
std::string nearest_of(const std::string& value, const std::vector<std::string>& options);

} // namespace gradwire::scheduler
