#pragma once
/// @file replay.hpp
/// `gradwire replay RUN_DIR`: a recorded run (experiment.record) run again
/// in this process, its shards taking the updates in the record's order
/// (actors/update_record.hpp), so an asynchronous run across processes,
/// slow nodes and all, comes out the same bits. `--set` changes the
/// algorithm (staleness-aware lr, DC-ASGD, the learning rate, clipping)
/// and keeps the schedule: every update arrives in the recorded order, at
/// its recorded staleness, and a variant is compared free of timing noise.

#include "actors/update_record.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/single_run.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace gradwire::scheduler {

struct replay_request {
  std::string run_dir;
  std::string out; ///< "": RUN_DIR-replay
  std::vector<std::string> overrides;
};

/// A replay's config and what the records let it follow.
struct replay_source {
  run_config cfg; ///< the run's config.toml with the overrides, in one process, at full speed
  /// The records' cut (null: a lock-step run, deterministic without one).
  std::shared_ptr<const actors::replay_cut> cut;
  nlohmann::json facts; ///< summary.json's "replay"
};

/// Refuses a --set (or a paired sweep's variant) that changes the
/// schedule a replay follows, naming the key.
void check_replay_overrides(const std::vector<std::string>& overrides);

/// Reads RUN_DIR's config.toml and record/; throws gradwire::error naming
/// the folder or file when there is nothing to replay, a record is
/// malformed or does not belong to the config.
replay_source open_replay(const replay_request& r);

/// The record files in `dir`, summed: files, updates, bytes, bytes per
/// update, and whether one was cut or capped; null when there are none.
nlohmann::json record_facts(const std::string& dir);

/// Whether two model.safetensors files hold the same tensors, byte for
/// byte, whatever their metadata (each holds its own run's config); false
/// when either cannot be read.
bool same_tensors(const std::string& a, const std::string& b);

} // namespace gradwire::scheduler
