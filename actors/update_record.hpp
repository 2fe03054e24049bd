#pragma once
/// @file update_record.hpp
/// The record of an asynchronous run (experiment.record): each
/// parameter-server shard writes, in the order it did them, every push it
/// applied (worker, step, staleness) and every pull it answered (worker,
/// step). Nothing else decides what an async shard holds: the gradients
/// follow from the parameters each worker read and from its batches (seeded),
/// so a replay that takes the same updates in the same order, and answers
/// the same pulls between them, writes the same parameters bit for bit
/// (`gradwire replay`, replay_gate in ps_shard_state.hpp).
///
/// A file, `record/shard-<id>.gwr` in the results folder:
/// - `GWREC001`, a little-endian u32 length, and a header text of
///   `key value` lines (shard, begin, end, workers, and run: the run's id);
/// - entries, back to back. An entry starts with a varint `rank * 2 + serve`,
///   then the zigzag varint of its step minus the previous step of that
///   rank in this file; an apply adds the varint staleness. An apply is
///   3 bytes and a pull 2 for fewer than 64 workers and steady steps.
/// Each apply goes to the file at once, with the pulls answered before it
/// (one write, no fsync: the kernel keeps it when the process is killed),
/// so a killed run's file ends at its last update. A crashed machine or a
/// full disk may end it inside an entry: the reader keeps every whole
/// entry and says the file was cut.

#include "actors/mix_record.hpp"
#include "actors/record_file.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gradwire::actors {

struct record_entry {
  bool serve = false;         ///< a pull answered; else a push applied
  int rank = 0;               ///< the worker
  std::int64_t step = 0;      ///< the push's step; a pull: the step it is for
  std::int64_t staleness = 0; ///< an apply: shard version when applied minus the version the push was computed on
  bool operator==(const record_entry& o) const {
    return serve == o.serve && rank == o.rank && step == o.step && staleness == o.staleness;
  }
};

struct record_header {
  int shard = 0;
  std::int64_t begin = 0, end = 0; ///< the shard's range of the parameter buffer
  int workers = 0;
  /// Steps a worker takes per push: 1, or async DiLoCo's local_steps (its
  /// last round may be shorter). Absent from a header: 1.
  int steps_per_push = 1;
  std::string run{}; ///< the run's id (experiment.run_id); empty in records that name none
};

/// Appends a shard's entries to its file as they happen. Not thread-safe:
/// one shard writes one file. A write that fails (a full disk) ends the
/// record there, keeping what was written whole; error() says why.
class record_writer {
public:
  /// Creates `path` (its folder must exist); `max_bytes` bounds the file
  /// (0: no bound): past it, entries are no longer written and capped()
  /// says so.
  record_writer(std::string path, const record_header& h, std::int64_t max_bytes);

  /// Adds `e`; an apply is written at once, with what is buffered.
  void add(const record_entry& e);
  /// Writes what is buffered.
  void flush() { file_.flush(); }
  std::int64_t entries() const { return entries_; }
  std::int64_t bytes() const { return file_.bytes(); }
  bool capped() const { return file_.capped(); }
  const std::string& error() const { return file_.error(); }
  const std::string& path() const { return file_.path(); }

private:
  record_file file_;
  std::vector<std::int64_t> last_step_; ///< by rank
  std::int64_t entries_ = 0;
};

/// A record file, read back.
struct shard_record {
  std::string path;
  record_header header;
  std::vector<record_entry> entries;
  bool cut = false;       ///< the file ended inside an entry (a killed run)
  std::int64_t bytes = 0; ///< the file's size
};

/// Reads `path`; throws gradwire::error naming the file (and the byte
/// offset) when it is not a record, or an entry is malformed (a rank
/// outside the header's workers, a negative step, an oversized varint).
shard_record read_record(const std::string& path);
/// The same from a file's bytes; `path` names it in messages.
shard_record record_from_bytes(const std::string& data, const std::string& path);

/// What a replay can follow of a set of shard records: each worker's
/// steps, and each shard's entries up to the first one that needs a step
/// some shard's record lacks (a killed run's records end at different
/// points). Complete records come back whole.
struct replay_cut {
  std::vector<std::int64_t> steps; ///< by rank: the steps the replay runs
  std::vector<shard_record> shards;
  /// AD-PSGD: each worker's store record, by rank (whole runs only).
  std::vector<std::shared_ptr<const mix_record>> mixers;
  std::int64_t entries_left_out = 0;
  /// Of them, pushes: the updates a cut-short run's records do not all
  /// hold (the others are pulls for steps their workers never finished).
  std::int64_t updates_left_out = 0;
};

/// `records` by shard id, all for `workers` workers (checked).
replay_cut consistent_cut(std::vector<shard_record> records, int workers);

} // namespace gradwire::actors
