#include "kernels/module_paths.hpp"

#include <unistd.h>

#include <cstdlib>

namespace gradwire::kernels {

std::vector<std::string> module_paths(const char* env, const char* file_name, const char* built) {
  if (const char* path = std::getenv(env); path != nullptr && *path != '\0')
    return {path};
  std::vector<std::string> out;
  char exe[4096];
  const auto len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    std::string dir(exe, static_cast<std::size_t>(len));
    dir.erase(dir.find_last_of('/') + 1);
    for (const char* sub : {"", "../", "../lib/gradwire/"})
      out.push_back(dir + sub + file_name);
  }
  if (built != nullptr)
    out.emplace_back(built);
  return out;
}

} // namespace gradwire::kernels
