#include "scheduler/app/version.hpp"

#ifndef GRADWIRE_VERSION
#error "GRADWIRE_VERSION is defined by scheduler/CMakeLists.txt"
#endif

namespace gradwire::scheduler {

const char* git_commit_of_build(); // git_commit.cpp, written at build time (cmake/GitCommit.cmake)

std::string version() { return GRADWIRE_VERSION; }

std::string git_commit() { return git_commit_of_build(); }

std::string version_line() { return "gradwire " + version() + " (commit " + git_commit() + ")"; }

} // namespace gradwire::scheduler
