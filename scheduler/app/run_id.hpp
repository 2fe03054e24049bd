#pragma once
/// @file run_id.hpp
/// The run id (experiment.run_id): what ties a results folder's files to
/// the run that wrote them. A run gets a new one as it starts, written into
/// config.toml, summary.json, every checkpoint's manifest and every record's
/// header; a resume keeps its folder's, and --resume and replay refuse a
/// checkpoint or record whose id is another run's.

#include "scheduler/app/config.hpp"

#include <string>

namespace gradwire::scheduler {

/// A new id for a run into `out`. Every rank of one job computes the same
/// one: from GRADWIRE_JOB_ID (set by --procs for each job it starts), or
/// srun's job and step ids, or mpirun's job; with the results folder mixed
/// in, so that the points of a sweep run by one srun step differ. A process
/// alone draws 16 random hex digits.
std::string new_run_id(const std::string& out);

/// Throws gradwire::error at `where` unless `id` is one gradwire could
/// have written: up to 64 letters, digits, '-', '_' and '.' ("" too).
void check_run_id(const std::string& id, const std::string& where);

/// Sets `c.run_id` to `id`, in `c.resolved_toml` too (config.toml says it).
void set_run_id(run_config& c, const std::string& id);

/// Gives `c` a new id unless it goes on with its own: a resume keeps its
/// folder's, and a replay the replayed run's (its records are that run's
/// schedule, byte for byte, and replay again as that run's).
void start_run(run_config& c, bool keeps_id);

} // namespace gradwire::scheduler
