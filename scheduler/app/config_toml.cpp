#include "scheduler/app/config_toml.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/config_renamed.hpp"
#include "scheduler/app/config_torch.hpp"
#include "scheduler/app/config_schema.hpp"

#include <algorithm>
#include <sstream>

namespace gradwire::scheduler::config_toml {

namespace {

/// The sections written as arrays of tables, one entry each.
bool entry_section(const std::string& key) { return key == "nodes" || key == "faults"; }

/// `n` is an array whose every element satisfies `is`.
template <class Pred> bool array_of(const toml::node& n, Pred is) {
  const auto* arr = n.as_array();
  return arr != nullptr && std::all_of(arr->begin(), arr->end(), is);
}

bool type_ok(const toml::node& n, value_type t) {
  switch (t) {
  case value_type::string: return n.is_string();
  case value_type::integer: return n.is_integer();
  case value_type::number: return n.is_number();
  case value_type::boolean: return n.is_boolean();
  case value_type::int_list: return array_of(n, [](const toml::node& e) { return e.is_integer(); });
  case value_type::number_list: return array_of(n, [](const toml::node& e) { return e.is_number(); });
  }
  return false;
}

/// An integer or number outside its key's range, refused.
void check_range(const key_spec& spec, const toml::node& n, const std::string& loc) {
  if (spec.range == any_value || (spec.type != value_type::integer && spec.type != value_type::number))
    return;
  const double v = spec.type == value_type::integer ? static_cast<double>(n.value<std::int64_t>().value_or(0))
                                                    : n.value<double>().value_or(0);
  const auto [lo, hi] = spec.range;
  if (v >= lo && v <= hi)
    return;
  throw error(loc + ": " + spec.key + " = " + shown_value(v, spec.type) + " is out of range [" +
              shown_value(lo, spec.type) + ", " + shown_value(hi, spec.type) + "]" +
              (lo > 0 && v <= 0 ? ": it must be greater than 0" : ""));
}

/// Checks one leaf against the schema; `loc` prefixes every message.
void check_leaf(const std::string& key, const toml::node& n, const std::string& loc) {
  const auto* spec = find_key(key);
  if (spec == nullptr) {
    auto near = nearest_key(key);
    throw error(loc + ": unknown key '" + key + "'" +
                (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                "; `gradwire keys` lists every key");
  }
  if (!type_ok(n, spec->type))
    throw error(loc + ": " + key + " must be " + to_string(spec->type));
  check_range(*spec, n, loc);
  if (!spec->allowed.empty()) {
    const auto v = n.value<std::string>().value_or("");
    if (std::find(spec->allowed.begin(), spec->allowed.end(), v) == spec->allowed.end()) {
      std::string all;
      for (const auto& a : spec->allowed)
        all += (all.empty() ? "" : ", ") + a;
      auto near = nearest_of(v, spec->allowed);
      throw error(loc + ": " + key + " = \"" + v + "\" is not one of: " + all +
                  (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
    }
  }
}

} // namespace

std::string where(const std::string& source, const toml::node& n) {
  const auto& src = n.source();
  if (src.begin.line == 0)
    return source;
  return source + ":" + std::to_string(src.begin.line);
}

void walk(const toml::table& t, const std::string& prefix, const std::string& source) {
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (free_form_args(key, v, where(source, v)))
      continue;
    if (const auto* sub = v.as_table()) {
      check(key != "nodes", where(source, v) + ": write [[nodes]] (an array of tables, one per group of workers), not [nodes]");
      check(key != "faults", where(source, v) + ": write [[faults]] (an array of tables, one per fault), not [faults]");
      bool known_section = false;
      for (const auto& s : config_schema())
        known_section = known_section || s.key.rfind(key + ".", 0) == 0;
      if (!known_section) {
        std::vector<std::string> sections;
        for (const auto& s : config_schema())
          sections.push_back(s.key.substr(0, s.key.find('.')));
        auto near = nearest_of(key, sections);
        throw error(where(source, v) + ": unknown section [" + key + "]" +
                    (near.empty() ? "" : " (did you mean [" + near + "]?)"));
      }
      walk(*sub, key, source);
    } else if (const auto* arr = v.as_array(); arr && entry_section(key)) {
      // [[nodes]], [[faults]]: arrays of tables, each checked against nodes.* / faults.*
      for (const auto& elem : *arr) {
        const auto* group = elem.as_table();
        check(group != nullptr, where(source, elem) + ": [[" + key + "]] entries must be tables");
        walk(*group, key, source);
      }
    } else {
      check_leaf(key, v, where(source, v));
    }
  }
}

namespace {

/// `key` of an array of tables ("faults.mtbf_s": [[faults]]): sets it in
/// every entry, so that a --set or a sweep axis reaches them; false for any
/// other key.
bool set_in_entries(toml::table& root, const std::string& key, const toml::node& value, const std::string& loc) {
  const auto dot = key.find('.');
  if (dot == std::string::npos || key.find('.', dot + 1) != std::string::npos)
    return false;
  const std::string array = key.substr(0, dot), leaf = key.substr(dot + 1);
  if (!entry_section(array))
    return false;
  auto* entries = root.get_as<toml::array>(array);
  check(entries != nullptr && !entries->empty(), loc + ": there is no [[" + array + "]] entry to set " + leaf + " in");
  for (auto& e : *entries) {
    auto* t = e.as_table();
    check(t != nullptr, loc + ": [[" + array + "]] entries must be tables");
    t->insert_or_assign(leaf, value);
  }
  return true;
}

} // namespace

/// Sets dotted `key` in `root` to the value parsed from `text` (TOML syntax,
/// or a bare word taken as a string); a key of [[faults]] or [[nodes]] in
/// every entry.
void apply_override(toml::table& root, const std::string& arg, std::set<std::string>& overridden) {
  const auto eq = arg.find('=');
  check(eq != std::string::npos && eq > 0, "--set " + arg + ": expected key=value");
  const std::string key = current_key(arg.substr(0, eq), "--set " + arg), text = arg.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", text}};
  }
  const toml::node& value = *parsed.get("v");
  const std::string loc = "--set " + arg;
  // A bare word for a string key ("--set model.kind=lenet5") is that string.
  if (const auto* spec = find_key(key); spec && spec->type == value_type::string && !value.is_string())
    parsed.insert_or_assign("v", text);
  if (!is_free_form_key(key))
    check_leaf(key, *parsed.get("v"), loc);
  if (set_in_entries(root, key, *parsed.get("v"), loc)) {
    overridden.insert(key);
    return;
  }
  const auto dot = key.rfind('.');
  auto* t = dot == std::string::npos ? &root : table_at(root, key.substr(0, dot), true);
  check(t != nullptr, loc + ": " + key.substr(0, dot) + " is not a table");
  t->insert_or_assign(dot == std::string::npos ? key : key.substr(dot + 1), *parsed.get("v"));
  overridden.insert(key);
}

toml::table* table_at(toml::table& root, const std::string& path, bool make) {
  toml::table* t = &root;
  for (std::size_t start = 0; t != nullptr;) {
    const auto dot = path.find('.', start);
    const auto part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (make && !t->contains(part))
      t->insert(part, toml::table{});
    t = t->get_as<toml::table>(part);
    if (dot == std::string::npos)
      break;
    start = dot + 1;
  }
  return t;
}

void for_each_leaf(const toml::table& t, const std::function<void(const std::string&, const toml::node&)>& fn,
                   const std::string& prefix) {
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = v.as_table())
      for_each_leaf(*sub, fn, key);
    else
      fn(key, v);
  }
}

const toml::node& reader::get(const std::string& key) {
  if (const auto* n = root.at_path(key).node())
    return *n;
  auto it = defaults.find(key);
  if (it == defaults.end()) {
    const auto* spec = find_key(key);
    check(spec != nullptr, "internal: no schema entry for " + key);
    it = defaults.emplace(key, toml::parse("v = " + spec->default_value)).first;
  }
  return *it->second.get("v");
}

std::string reader::loc(const std::string& key) {
  if (overridden.count(key))
    return "--set " + key;
  if (const auto* n = root.at_path(key).node())
    return where(source, *n) + ": " + key;
  return source + ": " + key + " (default)";
}

std::int64_t reader::integer(const std::string& key) { return get(key).value<std::int64_t>().value_or(0); }

double reader::number(const std::string& key) { return get(key).value<double>().value_or(0); }

} // namespace gradwire::scheduler::config_toml
