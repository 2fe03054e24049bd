#pragma once
/// @file launch_env.hpp
/// Where this process stands in a job: rank and size from the launcher's
/// environment (srun: SLURM_PROCID/SLURM_NTASKS; mpirun:
/// OMPI_COMM_WORLD_RANK/SIZE; MPICH/Hydra: PMI_RANK/PMI_SIZE; gradwire's
/// own --procs launcher: GRADWIRE_RANK/GRADWIRE_SIZE), and the rendezvous
/// address (GRADWIRE_RENDEZVOUS=host:port, or MASTER_ADDR/MASTER_PORT as
/// with torchrun; under srun, the step's first node, or loopback on one
/// node, at a port of the job step's own; else 127.0.0.1:29500) and job
/// token (GRADWIRE_TOKEN; required when the rendezvous host is not a
/// loopback address).

#include "transport/rendezvous.hpp"

#include <string>
#include <vector>

namespace gradwire::transport {

struct launch_info {
  int rank = 0, size = 1;
  std::string source = "single process"; ///< which variables gave rank and size
  rendezvous_options rendezvous;
};

/// Reads the environment. Inconsistent or malformed variables throw
/// gradwire::error naming the variable.
launch_info detect_launch();

/// The first host of a SLURM node list: "node[01-04],gpu3" -> "node01".
/// Throws gradwire::error on a malformed list.
std::string first_host_of(const std::string& list);

/// Each rank's host as a number (`hosts`: each rank's host identity, by
/// rank), hosts numbered in the order of their lowest rank: the groups of
/// a hierarchical allreduce by host, and the communicator's host table.
std::vector<int> host_numbers(const std::vector<std::string>& hosts);

/// Parses "host:port" (for --rendezvous and GRADWIRE_RENDEZVOUS).
void parse_host_port(const std::string& text, const std::string& what, rendezvous_options& out);

} // namespace gradwire::transport
