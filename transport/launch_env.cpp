#include "transport/launch_env.hpp"

#include "kernels/error.hpp"

#include <cstdlib>
#include <map>

namespace gradwire::transport {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

long env_long(const char* name, const char* v, long limit) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  check(end && end != v && *end == '\0', std::string("environment variable ") + name + "='" + v + "' is not a valid number");
  check(x >= 0 && x < limit, std::string("environment variable ") + name + "='" + v + "' is out of range [0, " +
                               std::to_string(limit - 1) + "]");
  return x;
}

int env_int(const char* name, const char* v) { return static_cast<int>(env_long(name, v, 1L << 24)); }

/// Under srun, rank 0 runs on the step's first node (SLURM places ranks
/// in blocks): its name is the rendezvous host when the step spans more
/// than one node (then GRADWIRE_TOKEN is needed, as for any
/// non-loopback rendezvous), else loopback.
void slurm_rendezvous_host(rendezvous_options& r) {
  const char* nodes = env("SLURM_STEP_NUM_NODES");
  if (!nodes)
    nodes = env("SLURM_NNODES");
  if (!nodes || env_long("SLURM_STEP_NUM_NODES", nodes, 1L << 24) <= 1)
    return;
  const char* list = env("SLURM_STEP_NODELIST");
  if (!list)
    list = env("SLURM_JOB_NODELIST");
  check(list != nullptr, "srun across " + std::string(nodes) +
                           " nodes but SLURM_STEP_NODELIST is not set: set GRADWIRE_RENDEZVOUS=HOST:PORT");
  r.host = first_host_of(list);
}

/// A port of the job step's own, so that steps sharing a node (a sweep's
/// points, several jobs) do not meet at one rendezvous: 29500 + (job id
/// * 16 + step id) mod 20000.
void slurm_rendezvous_port(rendezvous_options& r) {
  const char* job = env("SLURM_JOB_ID");
  if (!job)
    return;
  const long j = env_long("SLURM_JOB_ID", job, 1L << 40);
  const char* step = env("SLURM_STEP_ID");
  const long s = step ? env_long("SLURM_STEP_ID", step, 1L << 32) : 0;
  r.port = 29500 + static_cast<int>((j * 16 + s) % 20000);
}

} // namespace

std::string first_host_of(const std::string& list) {
  // "node[01-04,07],gpu3" -> "node01"; "a,b" -> "a"; "vm" -> "vm".
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    if (c == ',')
      break;
    if (c != '[') {
      out += c;
      continue;
    }
    const auto close = list.find(']', i);
    check(close != std::string::npos, "SLURM node list '" + list + "': '[' without ']'");
    const auto range = list.substr(i + 1, close - i - 1);
    out += range.substr(0, range.find_first_of("-,"));
    break;
  }
  check(!out.empty(), "SLURM node list '" + list + "' names no host");
  return out;
}

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
  const bool slurm = li.source.rfind("SLURM_", 0) == 0;
  if (const char* rv = env("GRADWIRE_RENDEZVOUS"))
    parse_host_port(rv, "GRADWIRE_RENDEZVOUS", li.rendezvous);
  else {
    if (const char* a = env("MASTER_ADDR"))
      li.rendezvous.host = a;
    else if (slurm)
      slurm_rendezvous_host(li.rendezvous);
    if (const char* p = env("MASTER_PORT"))
      parse_host_port(li.rendezvous.host + ":" + p, "MASTER_PORT", li.rendezvous);
    else if (slurm)
      slurm_rendezvous_port(li.rendezvous);
  }
  if (const char* t = env("GRADWIRE_TOKEN"))
    li.rendezvous.token = t;
  return li;
}

std::vector<int> host_numbers(const std::vector<std::string>& hosts) {
  std::map<std::string, int> number;
  std::vector<int> out;
  for (const auto& h : hosts)
    out.push_back(number.emplace(h, static_cast<int>(number.size())).first->second);
  return out;
}

} // namespace gradwire::transport
