#pragma once
/// @file shard_copies.hpp
/// A lock-step parameter-server shard's copies of itself for checkpoints.
/// The coordinator collects every worker's part of step S first, then asks
/// each shard for its version at S; meanwhile the job goes on. So a shard
/// keeps copies:
///  - at every version that is a multiple of `every` (the last two), for
///    checkpoints every N steps;
///  - at a pinned version (a checkpoint by time: the coordinator pins the
///    version before it lets the workers go on), until it is asked for,
///    however far the shard has moved on by then;
/// and answers a request for a version it has not reached when that
/// version will be kept.

#include "actors/snapshot.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::actors {

class shard_copies {
public:
  using take_fn = std::function<snapshot()>; ///< the shard's state now
  /// (meta, floats) of a copy, as the snapshot reply carries it.
  using reply = std::pair<std::string, slice>;

  /// At most this many pinned versions wait: pins a coordinator never asks
  /// for (a checkpoint given up) leak nothing.
  static constexpr std::size_t max_pins = 4;

  shard_copies(std::int64_t every, std::string who) : every_(every), who_(std::move(who)) {}

  /// After the shard reached `version`: keeps what is due, answers the
  /// requests waiting for it.
  void after_version(std::int64_t version, const take_fn& take);
  /// Keeps `version` until asked for. `now`: the shard's version; a pin of
  /// a version already gone (it came late) keeps nothing.
  void pin(std::int64_t version, std::int64_t now, const take_fn& take);
  /// The copy of `version` (a pinned one is let go), or null.
  const snapshot* find(std::int64_t version) const;
  void taken(std::int64_t version);
  /// Whether a request for `version`, ahead of `now`, can wait for it.
  bool will_keep(std::int64_t version, std::int64_t now) const;
  void wait(std::int64_t version, caf::response_promise rp) { waiting_.emplace_back(version, std::move(rp)); }
  static reply as_reply(const snapshot& s);
  std::string missing(std::int64_t version, std::int64_t now) const;

private:
  void bound();

  std::int64_t every_;
  std::string who_;
  std::vector<snapshot> kept_;   ///< at multiples of every_, the last two
  std::vector<std::int64_t> pins_;
  std::vector<snapshot> pinned_;
  std::vector<std::pair<std::int64_t, caf::response_promise>> waiting_;
};

} // namespace gradwire::actors
