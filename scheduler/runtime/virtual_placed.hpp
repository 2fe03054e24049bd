#pragma once
/// @file virtual_placed.hpp
/// Inside the simulation (virtual_time.cpp, virtual_models.cpp): the
/// loop's record of each placed actor and of each event waiting in its
/// heap. Not for other code.

#include "scheduler/runtime/compute_pool.hpp"

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace gradwire::scheduler {

struct virtual_event {
  std::int64_t t = 0;
  std::uint64_t seq = 0;
  placed_actor* to = nullptr;
  caf::mailbox_element_ptr m;
  /// Not 0: no message, but the time at which `to`'s offloaded computation
  /// (its number `computed`) is due.
  std::uint64_t computed = 0;
  /// For the heap: the latest first out of std::pop_heap's max-heap order.
  bool operator<(const virtual_event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct placed_actor {
  caf::actor real, handle;
  int host = 0;
  int rank = -1; ///< a worker's rank, or -1
  int process = -1; ///< the worker rank whose process it lives in (link faults)
  std::int64_t busy_until = 0;
  bool down = false;
  /// Its computation handed to the pool (offload), until the loop takes it.
  std::shared_ptr<compute_pool::task> job;
  std::uint64_t jobs = 0;  ///< offloads so far: the number of the last
  bool due_posted = false; ///< the job's due event is in the heap
  /// Messages that reached it while it computed: back in the heap, as they
  /// were, once its computation has been taken.
  std::vector<virtual_event> deferred;
};

} // namespace gradwire::scheduler
