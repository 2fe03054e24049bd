#pragma once
/// @file version.hpp
/// Which gradwire this is: the project's version and the git commit it was
/// built from (`gradwire --version`, summary.json's "gradwire").

#include <string>

namespace gradwire::scheduler {

/// The project's version, e.g. "0.1.0".
std::string version();
/// The commit's hash (12 digits) with "-dirty" when the sources differed
/// from it, or "unknown" when built outside a git checkout.
std::string git_commit();
/// "gradwire 0.1.0 (commit 0123456789ab)".
std::string version_line();

} // namespace gradwire::scheduler
