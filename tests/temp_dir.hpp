#pragma once
// A fresh, empty folder under the system's temporary directory, named for
// the test process and case (removed first if a killed run left it).
#include <filesystem>
#include <string>
#include <unistd.h>

namespace gwtest {

inline std::string fresh_dir(const std::string& name, bool create = false) {
  auto p = std::filesystem::temp_directory_path() / ("gw-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(p);
  if (create)
    std::filesystem::create_directories(p);
  return p.string();
}

} // namespace gwtest
