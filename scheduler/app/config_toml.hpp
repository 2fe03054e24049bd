#pragma once
/// @file config_toml.hpp
/// The checked TOML document behind a config (internal to scheduler/app):
/// every leaf checked against config_schema() with the file and line of
/// a mistake and the nearest valid key or value, `--set` overrides merged
/// in, and a reader that falls back to the schema's defaults.

#include <toml++/toml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

namespace gradwire::scheduler::config_toml {

/// "file:line" of `n` (the file alone when the node has no place).
std::string where(const std::string& source, const toml::node& n);

/// Checks every key and value under `t` against the schema (unknown keys
/// and sections, types, allowed values); throws gradwire::error naming
/// the place.
void walk(const toml::table& t, const std::string& prefix, const std::string& source);

/// Sets dotted `key` in `root` to the value parsed from "key=text" (TOML
/// syntax, or a bare word taken as a string), checked as a leaf.
void apply_override(toml::table& root, const std::string& arg, std::set<std::string>& overridden);

/// The table at dotted `path` under `root` ("topology.diloco"), each
/// missing level made when `make`; null where a level is missing (and not
/// made) or is not a table.
toml::table* table_at(toml::table& root, const std::string& path, bool make);

/// Calls fn(dotted key, value) for every non-table value under `t`
/// ("a" = { b = 1 } and "a.b" = 1 both give "a.b").
void for_each_leaf(const toml::table& t, const std::function<void(const std::string&, const toml::node&)>& fn,
                   const std::string& prefix = "");

/// Reads `key` from the merged table, falling back to the schema default.
struct reader {
  const toml::table& root;
  const std::string& source;
  const std::set<std::string>& overridden; // keys set by --set
  std::map<std::string, toml::table> defaults; // parsed schema defaults, kept alive

  const toml::node& get(const std::string& key);
  /// Where `key` came from, for messages: "--set key", "file:line: key" or "file: key (default)".
  std::string loc(const std::string& key);
  std::string str(const std::string& key) { return get(key).value<std::string>().value_or(""); }
  /// The value of `key`, within its schema range (checked where the
  /// config was parsed).
  std::int64_t integer(const std::string& key);
  double number(const std::string& key);
  bool boolean(const std::string& key) { return get(key).value<bool>().value_or(false); }
};

} // namespace gradwire::scheduler::config_toml
