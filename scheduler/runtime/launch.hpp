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
/// processes; returns rank 0's exit status (the first non-zero one if
/// rank 0's is unknown). A rank other than 0 that fails is started again,
/// `restarts` times in all, with GRADWIRE_REJOIN=1 (train.restarts): the
/// new process asks rank 0 to be let into the job.
int launch_local(int n, const std::vector<std::string>& args, int restarts = 0);

/// A random token for a job (hex).
std::string fresh_token();

} // namespace gradwire::scheduler
