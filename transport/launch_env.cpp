#include "transport/launch_env.hpp"

#include "kernels/error.hpp"

#include <cstdlib>

namespace gradwire::transport {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, const char* v) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  check(end && *end == '\0' && x >= 0 && x < (1 << 24),
        std::string("environment variable ") + name + "='" + v + "' is not a valid number");
  return static_cast<int>(x);
}

} // namespace

void parse_host_port(const std::string& text, const std::string& what, rendezvous_options& out) {
  const auto colon = text.rfind(':');
  check(colon != std::string::npos && colon > 0 && colon + 1 < text.size(),
        what + "='" + text + "' should be HOST:PORT");
  out.host = text.substr(0, colon);
  const auto port = text.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  check(end && *end == '\0' && p > 0 && p < 65536, what + "='" + text + "': port must be 1..65535");
  out.port = static_cast<int>(p);
}

launch_info detect_launch() {
  launch_info li;
  static const char* pairs[][2] = {{"GRADWIRE_RANK", "GRADWIRE_SIZE"},
                                   {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   {"PMI_RANK", "PMI_SIZE"},
                                   {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& p : pairs) {
    const char* r = env(p[0]);
    const char* s = env(p[1]);
    if (!r && !s)
      continue;
    check(r && s, std::string(r ? p[1] : p[0]) + " is not set but " + (r ? p[0] : p[1]) + " is");
    li.rank = env_int(p[0], r);
    li.size = env_int(p[1], s);
    check(li.size >= 1 && li.rank < li.size, std::string(p[0]) + "=" + r + " is out of range for " + p[1] + "=" + s);
    li.source = std::string(p[0]) + "/" + p[1];
    break;
  }
  if (const char* rv = env("GRADWIRE_RENDEZVOUS"))
    parse_host_port(rv, "GRADWIRE_RENDEZVOUS", li.rendezvous);
  else {
    if (const char* a = env("MASTER_ADDR"))
      li.rendezvous.host = a;
    if (const char* p = env("MASTER_PORT"))
      parse_host_port(li.rendezvous.host + ":" + p, "MASTER_PORT", li.rendezvous);
  }
  if (const char* t = env("GRADWIRE_TOKEN"))
    li.rendezvous.token = t;
  return li;
}

} // namespace gradwire::transport
