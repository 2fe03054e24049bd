#pragma once
/// @file launch.hpp
/// gradwire's own local launcher (`--procs N`): N copies of this program on
/// this machine, as srun or mpirun would start them, with GRADWIRE_RANK,
/// GRADWIRE_SIZE, GRADWIRE_RENDEZVOUS (a free loopback port) and
/// GRADWIRE_TOKEN (fresh random unless set) in their environment. When one
/// fails, the others are stopped (SIGTERM, then SIGKILL after a grace
/// period), so a job never hangs on a dead rank.

#include <string>
#include <vector>

namespace gradwire::scheduler {

/// Runs `args` (argv without the program and without --procs) as `n`
/// processes; returns the first non-zero exit status, or 0.
int launch_local(int n, const std::vector<std::string>& args);

/// A random token for a job (hex).
std::string fresh_token();

} // namespace gradwire::scheduler
