#pragma once
/// @file mix_record.hpp
/// The record of an AD-PSGD run (experiment.record). A worker's x_i lives
/// in a store it shares with its mixer (gossip_mixer.hpp), and four things
/// touch it, each under the store's lock: the worker reads x_i to take its
/// gradient at, copies it to send to a neighbour, then averages and
/// applies its gradient; and neighbours average into it through the
/// mixer. The order in which they took the lock, with the picks (seeded)
/// and the batches (seeded), decides every bit of the run, so a replay
/// that takes each store's events in the recorded order writes the same
/// parameters (`gradwire replay`, the store's gate in gossip_mixer.hpp).
///
/// A file per worker, `record/mixer-<rank>.gwr` in the results folder:
/// - `GWMIX001`, a little-endian u32 length, and a header text of
///   `key value` lines (worker, workers);
/// - events, back to back: a varint `rank * 8 + kind`, then the zigzag
///   varint of its step minus the previous step of that rank in this file.
///   An event is 2 bytes for fewer than 16 workers and steady steps.
/// Each apply reaches the file at once, with the events before it; the
/// last event of a finished worker's file is its close.

#include "actors/record_file.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::actors {

enum class mix_kind : std::uint8_t {
  read = 0,        ///< the worker reads x_i to take its step's gradient at
  send = 1,        ///< the worker copies x_i to send to the neighbour it picked
  mix = 2,         ///< a neighbour (`rank`, at its `step`) averaged into x_i
  apply_mixed = 3, ///< the worker averaged x_i with the neighbour's reply and applied its gradient
  apply_alone = 4, ///< the worker applied its gradient without an average (no reply in time)
  close = 5,       ///< the worker finished: no more averaging
};
inline constexpr int mix_kinds = 6;

struct mix_event {
  mix_kind kind = mix_kind::read;
  int rank = 0;          ///< the store's worker; for mix, the neighbour
  std::int64_t step = 0; ///< that worker's step
  bool operator==(const mix_event& o) const { return kind == o.kind && rank == o.rank && step == o.step; }
  bool applies() const { return kind == mix_kind::apply_mixed || kind == mix_kind::apply_alone; }
};

/// "worker 2's read at step 5", "worker 1's average at its step 3".
std::string describe(const mix_event& e);

struct mix_header {
  int worker = 0;  ///< whose store
  int workers = 0; ///< in the run
  std::string run{}; ///< the run's id (experiment.run_id); empty in records that name none
};

/// Appends a store's events to its file as they happen. Not thread-safe:
/// called under the store's lock.
class mix_record_writer {
public:
  mix_record_writer(std::string path, const mix_header& h, std::int64_t max_bytes);
  void add(const mix_event& e);
  std::int64_t events() const { return events_; }
  std::int64_t bytes() const { return file_.bytes(); }
  bool capped() const { return file_.capped(); }
  const std::string& error() const { return file_.error(); }

private:
  record_file file_;
  std::vector<std::int64_t> last_step_; ///< by rank
  std::int64_t events_ = 0;
};

/// A store's record, read back.
struct mix_record {
  std::string path;
  mix_header header;
  std::vector<mix_event> events;
  bool cut = false;       ///< the file ended inside an event
  std::int64_t bytes = 0; ///< the file's size
  /// Whether the worker finished: its last event is its close.
  bool closed() const { return !events.empty() && events.back().kind == mix_kind::close; }
  /// The steps the worker finished (its applies).
  std::int64_t steps() const;
};

/// Reads `path`; throws gradwire::error naming the file (and the byte
/// offset) when it is not a mixer record, or an event is malformed (a
/// rank outside the header's workers, an unknown kind, a negative step).
mix_record read_mix_record(const std::string& path);
mix_record mix_record_from_bytes(const std::string& data, const std::string& path);

/// Checks that `r` can be replayed: whole (closed, not cut), the store's
/// own events in step order (read, send, apply per step, then close).
void check_replayable(const mix_record& r);

/// Checks that a run's records (by rank) agree on their pairings: each
/// average a store took is of a step whose send its neighbour recorded,
/// once, and each apply after averaging had one store average with it.
void check_pairings(const std::vector<const mix_record*>& by_rank);

} // namespace gradwire::actors
