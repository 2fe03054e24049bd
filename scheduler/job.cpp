#include "scheduler/job.hpp"

#include "transport/ucx_link.hpp"

#include <algorithm>
#include <map>
#include <thread>

namespace gradwire::scheduler {

job join_job(caf::actor_system& sys, const job_options& opts) {
  job j;
  j.launch = transport::detect_launch();
  if (!opts.rendezvous.empty())
    transport::parse_host_port(opts.rendezvous, "--rendezvous", j.launch.rendezvous);
  if (!opts.token.empty())
    j.launch.rendezvous.token = opts.token;
  j.launch.rendezvous.timeout_ms = opts.timeout_ms;
  transport::ucx_options uo;
  uo.tls = opts.tls;
  uo.spin_us = opts.spin_us;
  uo.spin_yield = opts.spin_yield;
  uo.shm_refs = opts.shm_refs;
  uo.progress_nice = opts.progress_nice;
  if (opts.pin)
    uo.pin_cpu = j.launch.rank % static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto link = std::make_unique<transport::ucx_link>(j.launch.rank, j.launch.size, uo);
  auto table = transport::rendezvous(j.launch.rank, j.launch.size, j.launch.rendezvous, link->address());
  link->connect(table);
  j.allocation = std::make_shared<transport::arena_allocation>(link->arena_allocator(), uo.min_ref_bytes);
  j.live = opts.live;
  j.node = std::make_shared<transport::node>(sys, transport::emulate(std::move(link), opts.shape),
                                             j.launch.rendezvous.token);
  return j;
}

} // namespace gradwire::scheduler

namespace gradwire::scheduler {

namespace {
using barrier_atom = caf::atom_constant<caf::atom("barrier")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
} // namespace

void publish_barrier(caf::actor_system& sys, job& j) {
  const int n = j.launch.size;
  std::weak_ptr<transport::node> weak = j.node;
  auto b = sys.spawn([n, weak](caf::event_based_actor* self) -> caf::behavior {
    auto waiting = std::make_shared<std::map<int, std::map<int, caf::actor>>>(); // epoch -> rank -> waiter
    // Released once every rank has arrived or is known to have failed (a
    // job that carried on without a worker must still end).
    auto try_release = [=](int epoch) {
      auto& w = (*waiting)[epoch];
      auto nd = weak.lock();
      for (int r = 0; r < n; ++r)
        if (!w.count(r) && !(nd && nd->is_down(r)))
          return;
      // The other ranks first: a proxy hands its frame to the link on this
      // thread, so they are in flight before this rank's own waiter can
      // go on to close the link (which waits for frames in flight, not for
      // ones not yet sent: a late release left ranks 2 and 3 of a 4-rank
      // job waiting at the last barrier).
      const int me = nd ? nd->rank() : -1;
      for (auto& [r, a] : w)
        if (r != me)
          self->send(a, release_atom::value, epoch);
      if (auto it = w.find(me); it != w.end())
        self->send(it->second, release_atom::value, epoch);
      waiting->erase(epoch);
    };
    return {
      [=](barrier_atom, int epoch, int rank, caf::actor waiter) {
        (*waiting)[epoch][rank] = std::move(waiter);
        try_release(epoch);
      },
      [=](caf::atom_constant<caf::atom("recheck")>, int epoch) {
        if (waiting->count(epoch))
          try_release(epoch);
      },
      [=](caf::atom_constant<caf::atom("missing")>, int epoch) {
        std::string names;
        auto& w = (*waiting)[epoch];
        for (int r = 0; r < n; ++r)
          if (!w.count(r))
            names += (names.empty() ? "" : ", ") + std::to_string(r);
        return names;
      },
    };
  });
  j.node->publish(transport::slots::barrier, b);
}

void barrier(caf::actor_system& sys, job& j, int epoch, int timeout_ms) {
  if (j.launch.size == 1)
    return;
  caf::scoped_actor me{sys};
  auto root = j.node->remote(0, transport::slots::barrier);
  me->send(root, barrier_atom::value, epoch, j.launch.rank, caf::actor_cast<caf::actor>(me));
  bool ok = false, waited_out = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!ok && !waited_out) {
    me->receive([&](release_atom, int e) { ok = e == epoch; },
                caf::after(std::chrono::milliseconds(200)) >> [&] {
                  waited_out = std::chrono::steady_clock::now() > until;
                  if (j.launch.rank == 0) // ranks may have failed since
                    me->send(root, caf::atom_constant<caf::atom("recheck")>::value, epoch);
                });
  }
  if (ok)
    return;
  std::string missing = "?";
  if (j.launch.rank == 0)
    me->request(root, std::chrono::seconds(5), caf::atom_constant<caf::atom("missing")>::value, epoch)
      .receive([&](const std::string& names) { missing = names; }, [](caf::error&) {});
  throw error("rank " + std::to_string(j.launch.rank) + ": barrier " + std::to_string(epoch) + " timed out after " +
              std::to_string(timeout_ms / 1000) + " s" +
              (j.launch.rank == 0 ? " waiting for rank(s) " + missing : std::string(" waiting for rank 0")));
}

} // namespace gradwire::scheduler
