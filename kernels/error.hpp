#pragma once
/// @file error.hpp
/// The error type thrown inside a process by every layer up to the
/// scheduler. Messages say what went wrong and where (file, line, key, rank).
/// Actor boundaries convert it into caf::error instead of letting it cross.

#include <stdexcept>
#include <string>

namespace gradwire {

/// An error with a message written for the person running the job.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Throws gradwire::error with `msg` unless `cond` holds.
inline void check(bool cond, const std::string& msg) {
  if (!cond)
    throw error(msg);
}

} // namespace gradwire
