#include "scheduler/app/run_id.hpp"

#include "kernels/error.hpp"
#include "scheduler/runtime/launch.hpp"
#include "transport/codec.hpp"
#include "transport/launch_env.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace gradwire::scheduler {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

/// What names this job on every one of its ranks, or "" for a process alone.
std::string job_key() {
  if (auto id = env_or_empty("GRADWIRE_JOB_ID"); !id.empty())
    return "gradwire " + id;
  if (transport::detect_launch().size <= 1)
    return "";
  if (auto job = env_or_empty("SLURM_JOB_ID"); !job.empty())
    return "slurm " + job + "." + env_or_empty("SLURM_STEP_ID");
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"})
    if (auto job = env_or_empty(name); !job.empty())
      return std::string("mpi ") + job;
  return "";
}

} // namespace

std::string new_run_id(const std::string& out) {
  const auto key = job_key();
  if (key.empty())
    return fresh_token().substr(0, 16);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(transport::token_hash(key + "\n" + out))); // (FNV-1a)
  return hex;
}

void check_run_id(const std::string& id, const std::string& where) {
  check(id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
        }),
        where + " = \"" + id + "\" is not a run id (up to 64 letters, digits, '-', '_', '.'); gradwire writes it: leave it out");
}

void set_run_id(run_config& c, const std::string& id) {
  c.run_id = id;
  auto root = toml::parse(c.resolved_toml, c.source);
  if (auto* experiment = root["experiment"].as_table())
    experiment->insert_or_assign("run_id", id);
  std::ostringstream os;
  os << root;
  c.resolved_toml = os.str() + "\n";
}

void start_run(run_config& c, bool keeps_id) {
  if (!keeps_id) // (a folder from before run ids goes on without one)
    set_run_id(c, new_run_id(c.out));
}

} // namespace gradwire::scheduler
