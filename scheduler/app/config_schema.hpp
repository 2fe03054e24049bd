#pragma once
/// @file config_schema.hpp
/// Every config key gradwire knows: its type, default, allowed values and a
/// one-line description. The parser rejects anything not listed here and
/// `gradwire keys` prints this table, so it is the single source of truth.

#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

enum class value_type { string, integer, number, boolean, int_list, number_list };

/// The closed interval an integer or number must lie in.
using value_range = std::pair<double, double>;
constexpr value_range any_value{-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
/// [lo, hi], for the table: in(1, 1024).
constexpr value_range in(double lo, double hi) { return {lo, hi}; }

struct key_spec {
  std::string key;                  ///< dotted path, e.g. "train.lr"
  value_type type;
  std::string default_value;        ///< as TOML text
  std::vector<std::string> allowed; ///< for strings: the accepted values (empty = any)
  std::string doc;
  /// Integers and numbers: the values accepted, checked where the config
  /// is parsed (a file, --set or a sweep's values), so that a reader
  /// takes the value as it is.
  value_range range = any_value;
};

/// `x` as a user writes it: 0.05, 1e-12, 1048576; integers whole.
std::string shown_value(double x, value_type t);

const std::vector<key_spec>& config_schema();
const key_spec* find_key(const std::string& key);
std::string to_string(value_type t);

/// The known key closest to `key` by edit distance (empty if none is close).
std::string nearest_key(const std::string& key);
/// The closest of `options` to `value` (empty if none is close).
std::string nearest_of(const std::string& value, const std::vector<std::string>& options);

} // namespace gradwire::scheduler
