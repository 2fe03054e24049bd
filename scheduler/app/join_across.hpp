#pragma once
/// @file join_across.hpp
/// A run across processes (srun, mpirun, --procs): joining the job, and
/// what each rank does when a peer is lost (rank 0's coordinator decides;
/// the others report lost ring neighbours to it, and leave when rank 0 is
/// gone or fences them, saying how to resume).

#include "scheduler/app/config.hpp"
#include "scheduler/runtime/job.hpp"
#include "scheduler/runtime/topology.hpp"

#include <caf/all.hpp>

#include <optional>

namespace gradwire::scheduler {

/// Joins the job, and sets up the setup's node, barrier and the start of
/// the node once every actor is published. A failed rank reaches rank 0's
/// coordinator, which fails the run naming it or carries on without it;
/// other ranks stop when rank 0 is gone.
void join_across(caf::actor_system& sys, const run_config& cfg, topology_setup& setup, std::optional<job>& jb);

} // namespace gradwire::scheduler
