#pragma once
/// @file json_number.hpp
/// A number from a results file's JSON object, read without trusting it:
/// `dflt` (NaN unless given) where the key is missing or not a number.

#include <nlohmann/json.hpp>

#include <cmath>

namespace gradwire::scheduler {

inline double json_number(const nlohmann::json& j, const char* key, double dflt = std::nan("")) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : dflt;
}

} // namespace gradwire::scheduler
