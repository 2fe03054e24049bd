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

/// check() for paths that run per message or per tensor view: the message
/// is built only when `cond` fails. (A check() whose message concatenates
/// strings builds them every time, a cost a per-message path notices:
/// bench/RESULTS.md, "Figures behind the code".)
#define GW_CHECK(cond, msg)                                                                                            \
  do {                                                                                                                 \
    if (!(cond))                                                                                                       \
      throw ::gradwire::error(msg);                                                                                    \
  } while (false)
