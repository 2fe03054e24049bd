#pragma once
/// @file checkpoint.hpp
/// Checkpoints on disk: RUN_DIR/checkpoints/step-NNNNNNNNN/ holds one file
/// per actor part (part-worker-0.gwc, part-shard-1.gwc, ...) and
/// MANIFEST.json, written last. A checkpoint without its manifest does not
/// exist. Every file is written atomically (temporary file, fsync,
/// rename, fsync of the folder).
///
/// A part file: "GWCKPT01", then three little-endian u64 (meta bytes,
/// float bytes, CRC-32 of meta and floats), the meta text
/// (actors/snapshot.hpp) and the floats. The manifest lists every part
/// with its size and CRC, and what the state belongs to (model, its
/// parameter count, topology, workers, shards, optimizer), so a corrupt,
/// truncated, or mismatched checkpoint is refused naming the file and
/// what is wrong.
///
/// Two-phase, as CheckFreq: the actors copy their state at a step boundary
/// (the only cost to a step: a memory copy); checkpoint_writer persists it
/// on its own thread while training goes on.

#include "actors/snapshot.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/runtime/topology.hpp"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gradwire::scheduler {

/// What a checkpoint's state belongs to (the manifest's "identity"): a
/// resume under a config that differs here is refused.
nlohmann::json checkpoint_identity(const run_config& cfg, std::int64_t parameters);

/// Persists checkpoints in the background, keeping the newest `keep`.
class checkpoint_writer {
public:
  checkpoint_writer(std::string run_dir, int keep, nlohmann::json identity);
  ~checkpoint_writer(); ///< writes what is queued, then stops
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;
  /// Queues the checkpoint of `step` (`run`: the run's own state so far,
  /// e.g. seconds trained, into the manifest).
  void submit(std::int64_t step, std::vector<actors::snapshot_frame> parts, nlohmann::json run = nlohmann::json::object());
  /// Waits until everything queued is on disk.
  void drain();
  /// Checkpoints written, and the first error (empty: none).
  int written() const;
  std::string error() const;
  /// Seconds spent persisting (the background thread's work).
  double seconds() const;

private:
  struct job {
    std::int64_t step;
    std::vector<actors::snapshot_frame> parts;
    nlohmann::json run;
  };
  void loop();
  void write(const job& j);
  std::string dir_;
  int keep_;
  nlohmann::json identity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  bool busy_ = false, closing_ = false;
  int written_ = 0;
  double seconds_ = 0;
  std::string error_;
  std::thread thread_;
};

/// A checkpoint read back and checked.
struct loaded_checkpoint {
  std::string dir;       ///< its folder
  nlohmann::json manifest;
  std::shared_ptr<resume_point> point;
};

/// The checkpoint to resume from: `which` is a checkpoint folder, a run
/// folder (its newest complete checkpoint) or, with `step` > 0, that step's
/// in the run folder. Throws gradwire::error naming the file and what is
/// wrong (missing, truncated, corrupt, another format).
/// A checkpoint saved after lost workers holds the survivors' parts; they
/// become workers 0 .. k-1 in rank order.
loaded_checkpoint load_checkpoint(const std::string& which, std::int64_t step = 0);

/// The workers that checkpoint resumes with when it was saved after lost
/// workers (fewer than the config's); -1 otherwise or when it cannot be read.
int checkpoint_workers(const std::string& which, std::int64_t step = 0);

/// Throws unless the checkpoint's identity is `cfg`'s, naming what differs.
void check_identity(const loaded_checkpoint& c, const nlohmann::json& identity);

/// Serialises one part as a part file's bytes, and back (for tests and fuzzing).
std::string part_bytes(const actors::snapshot& s);
/// A part file's header and meta text (its floats follow as they are).
std::string part_head(const actors::snapshot_frame& f);
actors::snapshot part_from_bytes(const std::string& bytes, const std::string& where);

} // namespace gradwire::scheduler
