#pragma once
/// @file request_watch.hpp
/// The replies an actor waits for, each given up once its wait outlasts a
/// timeout while this process ran (kernels::waited). CAF's own request
/// timeout fires on the machine's clock: a job stopped for longer (SLURM's
/// scontrol suspend, Ctrl-Z, a debugger) failed every request in flight
/// when it ran again, though the replies were on their way. A request sent
/// with request_watch::timeout() and opened here behaves as CAF's would:
/// given up, its error handler gets sec::request_timeout and a late reply
/// is dropped. In virtual time CAF's timeout (on the simulation's clock)
/// is kept.

#include "kernels/stop_aware.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

namespace gradwire::actors {

class request_watch {
public:
  using failed_fn = std::function<void(caf::error&)>;

  /// The timeout to give CAF's request: none in real time (this watch
  /// keeps it), `limit` in virtual time.
  static caf::duration timeout(std::chrono::milliseconds limit, bool virtual_time) {
    return virtual_time ? caf::duration(limit) : caf::duration(caf::infinite);
  }

  /// A request sent now; `failed` is called if expire() gives it up.
  std::uint64_t open(failed_fn failed) {
    open_.emplace(++last_, entry{std::chrono::steady_clock::now(), std::move(failed)});
    return last_;
  }

  /// Its reply, or CAF's error, came: true if the request is still waited
  /// for (the reply counts), false if it was given up already.
  bool close(std::uint64_t ticket) { return open_.erase(ticket) > 0; }

  /// Gives up the oldest request waited for longer than `limit` while this
  /// process ran: forgets it, then calls its `failed` with
  /// request_timeout. False if none is overdue. (One at a time: a `failed`
  /// may end the actor, after which the others are not to be called.)
  bool expire_one(std::chrono::milliseconds limit) {
    for (auto it = open_.begin(); it != open_.end(); ++it) {
      if (!kernels::waited_longer(it->second.since, limit))
        continue;
      auto failed = std::move(it->second.failed);
      open_.erase(it);
      auto err = caf::make_error(caf::sec::request_timeout);
      failed(err);
      return true;
    }
    return false;
  }

  bool empty() const { return open_.empty(); }

private:
  struct entry {
    std::chrono::steady_clock::time_point since;
    failed_fn failed;
  };
  std::map<std::uint64_t, entry> open_;
  std::uint64_t last_ = 0;
};

} // namespace gradwire::actors
