#include "scheduler/runtime/job.hpp"
#include "kernels/log.hpp"

#include "actors/barrier.hpp"
#include "kernels/stop_aware.hpp"
#include "kernels/stop_request.hpp"
#include "transport/ucx_link.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

namespace gradwire::scheduler {

namespace {

transport::ucx_options link_options(const job_options& opts, const transport::launch_info& launch) {
  transport::ucx_options uo;
  uo.tls = opts.tls;
  uo.spin_us = opts.spin_us;
  uo.spin_yield = opts.spin_yield;
  uo.shm_refs = opts.shm_refs;
  uo.progress_nice = opts.progress_nice;
  if (opts.max_data_bytes > 0)
    uo.max_data_bytes = opts.max_data_bytes;
  if (opts.pin)
    uo.pin_cpu = launch.rank % static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  uo.token_hash = transport::token_hash(launch.rendezvous.token);
  return uo;
}

/// job_options::collective: the communicator, before the rendezvous that
/// carries its address.
std::unique_ptr<transport::ucx_comm> open_comm(const job_options& opts, const transport::launch_info& launch,
                                               std::uint64_t token_hash) {
  transport::comm_options co;
  co.tls = opts.tls;
  co.spin_yield = opts.spin_yield;
  co.timeout_ms = opts.comm_timeout_ms > 0 ? opts.comm_timeout_ms : opts.timeout_ms;
  co.ring_from_bytes = opts.ring_from_bytes;
  co.net = transport::parse_comm_net(opts.comm_net, "--net");
  co.token_hash = token_hash;
  return std::make_unique<transport::ucx_comm>(launch.rank, launch.size, co);
}

/// Every rank's communicator address from the rendezvous table; connects.
void connect_comm(job& j, const std::vector<std::vector<std::uint8_t>>& table) {
  std::vector<std::vector<std::uint8_t>> coll(table.size());
  for (std::size_t r = 0; r < table.size(); ++r) {
    auto peer = transport::collective_of(table[r], static_cast<int>(r));
    check(!peer.address.empty() || static_cast<int>(r) == j.launch.rank,
          "rank " + std::to_string(r) + " opened no collective communicator (a different command on each rank?)");
    coll[r] = std::move(peer.address);
  }
  j.comm->connect(coll, transport::host_numbers(j.hosts)); // by host identity, as the link shares memory
}

/// Rank 0 with job_options::replacements: hears the hellos of processes
/// that replace lost ranks, and admits each once its rank is cut off.
void hear_replacements(job& j, int listener, transport::rendezvous_options rv, int most,
                       std::vector<std::vector<std::uint8_t>> table) {
  rv.keep_listener = nullptr;
  std::weak_ptr<transport::node> weak = j.node;
  auto admitted = std::make_shared<int>(0);
  j.late = std::make_unique<transport::late_joins>(
    listener, rv, j.launch.size, std::move(table),
    [weak, admitted, most](int r, const std::vector<std::uint8_t>& address) -> std::string {
      auto nd = weak.lock();
      if (!nd)
        return "the job is over";
      if (!nd->rejoin().hears_knocks())
        return "later: this job lets no one back in yet (only an elastic ring does, once it runs)";
      if (!nd->is_cut_off(r)) // the launcher's word of its death may still be on its way
        return "later: rank " + std::to_string(r) + " is still in the job";
      if (*admitted >= most)
        return "rank " + std::to_string(r) + ": " + std::to_string(most) +
               " process(es) were replaced already (train.restarts)";
      ++*admitted;
      nd->rejoin().admit_process(r, address);
      log::info("rank 0: a new process for rank {} joined ({} of train.restarts = {})", r, *admitted, most);
      return "";
    });
}

} // namespace

job join_job(caf::actor_system& sys, const job_options& opts) {
  job j;
  j.launch = transport::detect_launch();
  if (!opts.rendezvous.empty())
    transport::parse_host_port(opts.rendezvous, "--rendezvous", j.launch.rendezvous);
  if (!opts.token.empty())
    j.launch.rendezvous.token = opts.token;
  j.launch.rendezvous.timeout_ms = opts.timeout_ms;
  const auto uo = link_options(opts, j.launch);
  auto link = std::make_unique<transport::ucx_link>(j.launch.rank, j.launch.size, uo);
  const transport::ucx_link* ul = link.get(); // owned by the node from below, which outlives `late`
  auto rv = j.launch.rendezvous;
  rv.late = opts.replacing;
  rv.check_address = [ul](const std::vector<std::uint8_t>& blob) { return ul->check_address(blob); };
  int listener = -1;
  if (j.launch.rank == 0 && opts.replacements > 0 && j.launch.size > 1)
    rv.keep_listener = &listener;
  auto mine = link->address();
  if (opts.collective) { // its address rides in the link's (ucx_setup::address::collective)
    j.comm = open_comm(opts, j.launch, uo.token_hash);
    mine = transport::with_collective(mine, j.comm->worker_address());
  }
  auto table = transport::rendezvous(j.launch.rank, j.launch.size, rv, mine);
  link->connect(table);
  for (std::size_t r = 0; r < table.size(); ++r)
    j.hosts.push_back(transport::collective_of(table[r], static_cast<int>(r)).host);
  if (j.comm)
    connect_comm(j, table);
  j.link = ul;
  j.allocation = std::make_shared<transport::arena_allocation>(link->arena_allocator(), uo.min_ref_bytes);
  j.live = opts.live;
  j.node = std::make_shared<transport::node>(sys, transport::emulate(std::move(link), opts.shape),
                                             j.launch.rendezvous.token);
  // What one peer's frames may hold here at once: 8 of the largest frames
  // the job needs. A ring neighbour is at most a round ahead and a worker
  // has a push and a pull in flight per shard, far below it.
  if (opts.max_data_bytes > 0)
    j.node->set_peer_budget(peer_budget_frames * opts.max_data_bytes);
  if (listener >= 0)
    hear_replacements(j, listener, rv, opts.replacements, std::move(table));
  return j;
}

} // namespace gradwire::scheduler

namespace gradwire::scheduler {

void publish_barrier(caf::actor_system& sys, job& j) {
  actors::barrier_config bc;
  bc.ranks = j.launch.size;
  bc.me = j.node->rank();
  std::weak_ptr<transport::node> weak = j.node;
  bc.is_down = [weak](int r) {
    auto nd = weak.lock();
    return nd && nd->is_down(r);
  };
  j.node->publish(transport::slots::barrier, caf::actor_cast<caf::actor>(actors::spawn_barrier(sys, std::move(bc))));
}

void barrier(caf::actor_system& sys, job& j, int epoch, int timeout_ms) {
  if (j.launch.size == 1)
    return;
  caf::scoped_actor me{sys};
  const auto root = actors::as_barrier(j.node->remote(0, transport::slots::barrier));
  me->send(root, actors::barrier_atom::value, epoch, j.launch.rank, caf::actor_cast<caf::actor>(me));
  bool ok = false, waited_out = false, stopped = false;
  const auto since = std::chrono::steady_clock::now();
  while (!ok && !waited_out && !stopped) {
    me->receive([&](actors::barrier_release_atom, int e) { ok = e == epoch; },
                caf::after(std::chrono::milliseconds(200)) >> [&] {
                  waited_out = kernels::waited_longer(since, std::chrono::milliseconds(timeout_ms));
                  stopped = kernels::stop_requested(); // a stop ends the wait, not the timeout
                  if (j.launch.rank == 0) // ranks may have failed since
                    me->send(root, actors::barrier_recheck_atom::value, epoch);
                });
  }
  if (ok)
    return;
  std::string missing = "?";
  if (j.launch.rank == 0)
    me->request(root, std::chrono::seconds(5), actors::barrier_missing_atom::value, epoch)
      .receive([&](const std::string& names) { missing = names; }, [](caf::error&) {});
  const auto whom = j.launch.rank == 0 ? " waiting for rank(s) " + missing : std::string(" waiting for rank 0");
  if (stopped)
    throw kernels::stopped("rank " + std::to_string(j.launch.rank) + ": barrier " + std::to_string(epoch) +
                           " stopped (Ctrl-C or SIGTERM)" + whom);
  throw error("rank " + std::to_string(j.launch.rank) + ": barrier " + std::to_string(epoch) + " timed out after " +
              std::to_string(timeout_ms / 1000) + " s" + whom);
}

} // namespace gradwire::scheduler
