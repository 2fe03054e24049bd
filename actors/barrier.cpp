#include "actors/barrier.hpp"

#include <map>
#include <memory>
#include <string>

namespace gradwire::actors {

barrier_actor spawn_barrier(caf::actor_system& sys, barrier_config cfg) {
  return sys.spawn([cfg](barrier_actor::pointer) -> barrier_actor::behavior_type {
    auto waiting = std::make_shared<std::map<int, std::map<int, caf::actor>>>(); // epoch -> rank -> waiter
    // Epoch -> the ranks it was released without (known failed then): what
    // a waiter that times out on a released epoch is told.
    auto released = std::make_shared<std::map<int, std::string>>();
    auto try_release = [=](int epoch) {
      auto& w = (*waiting)[epoch];
      std::string without;
      for (int r = 0; r < cfg.ranks; ++r) {
        if (w.count(r))
          continue;
        if (!(cfg.is_down && cfg.is_down(r)))
          return;
        without += (without.empty() ? "" : ", ") + std::to_string(r);
      }
      (*released)[epoch] = without;
      // The other ranks first: across processes a proxy hands its frame to
      // the link on this thread, so they are in flight before this rank's
      // own waiter can go on to close the link (which waits for frames in
      // flight, not for ones not yet sent).
      // (anon_send: a typed actor reaches the waiters, plain actors, only
      // so, and they need no sender.)
      for (auto& [r, a] : w)
        if (r != cfg.me)
          caf::anon_send(a, barrier_release_atom::value, epoch);
      if (auto it = w.find(cfg.me); it != w.end())
        caf::anon_send(it->second, barrier_release_atom::value, epoch);
      waiting->erase(epoch);
    };
    return {
      [=](barrier_atom, int epoch, int rank, caf::actor waiter) {
        (*waiting)[epoch][rank] = std::move(waiter);
        try_release(epoch);
      },
      [=](barrier_recheck_atom, int epoch) {
        if (waiting->count(epoch))
          try_release(epoch);
      },
      [=](barrier_missing_atom, int epoch) -> std::string {
        if (const auto it = released->find(epoch); it != released->end() && !waiting->count(epoch))
          return "none: epoch " + std::to_string(epoch) + " was released" +
                 (it->second.empty() ? std::string() : " without rank(s) " + it->second + ", reported failed") +
                 ", and the release did not reach this waiter";
        std::string names;
        auto& w = (*waiting)[epoch];
        for (int r = 0; r < cfg.ranks; ++r)
          if (!w.count(r))
            names += (names.empty() ? "" : ", ") + std::to_string(r);
        return names;
      },
    };
  });
}

} // namespace gradwire::actors
