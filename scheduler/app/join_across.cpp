#include "scheduler/app/join_across.hpp"
#include "actors/coordinator_protocol.hpp"
#include "kernels/log.hpp"

#include "actors/messages.hpp"
#include "models/model.hpp"
#include "transport/shm_arena.hpp"
#include "transport/ucx_setup.hpp"
#include "transport/ucx_link.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

namespace gradwire::scheduler {
namespace {

/// Under `--procs`, the launcher tells rank 0 of a rank's death as it
/// happens (a line "RANK what" on GRADWIRE_LAUNCHER_FD): that rank is cut
/// off at once instead of after the liveness bound.
void hear_launcher(const std::shared_ptr<transport::node>& node) {
  const char* fd_text = std::getenv("GRADWIRE_LAUNCHER_FD");
  if (fd_text == nullptr)
    return;
  const int fd = std::atoi(fd_text);
  if (fd < 3)
    return;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  std::weak_ptr<transport::node> weak = node;
  std::thread([fd, weak] {
    std::string buf;
    char chunk[256];
    for (;;) {
      const auto n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return; // the launcher is gone
      buf.append(chunk, static_cast<std::size_t>(n));
      for (auto nl = buf.find('\n'); nl != std::string::npos && nl < 256; nl = buf.find('\n')) {
        const auto line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        const int peer = std::atoi(line.c_str());
        auto nd = weak.lock();
        if (!nd)
          return;
        if (peer > 0 && peer < nd->size() && !nd->is_down(peer))
          nd->cut_off(peer, "the launcher saw its process " + line.substr(line.find(' ') + 1));
      }
      if (buf.size() > 4096)
        return; // not the launcher's lines
    }
  }).detach();
}

/// transport.rejoin_s: a rank cut off from rank 0 while its process is
/// alive (a stall or a partition that outlasted the liveness bound), or a
/// new process that replaces a lost one (train.restarts), knocks at rank 0
/// until it is let back in, or until `seconds` pass without rank 0
/// answering that it heard (it holds a knock until a step boundary it
/// chooses); then it leaves.
struct rejoining {
  std::atomic<bool> knocking{false}, back{false};
};

/// Leaves the job (no destructors run from a transport callback); 3: cut
/// off or stopped (a launcher with train.restarts starts it again).
[[noreturn]] void leave_now(int code = 3) {
  std::fflush(stderr);
  transport::unlink_arenas();
  std::_Exit(code);
}

void knock_until_back(std::weak_ptr<transport::node> weak, int rank, double seconds, std::shared_ptr<rejoining> rj,
                      std::string what) {
  if (rj->knocking.exchange(true))
    return; // knocking already
  rj->back = false;
  log::info("rank {}: {}: asking rank 0 to be let back in (for {:g} s after it last answers)", rank, what, seconds);
  std::thread([weak = std::move(weak), rank, seconds, rj, what = std::move(what)] {
    const auto window = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(seconds));
    const auto since = std::chrono::steady_clock::now();
    for (;;) {
      auto nd = weak.lock();
      if (!nd)
        return; // the job is over
      const auto heard = std::chrono::steady_clock::time_point(std::chrono::milliseconds(nd->rejoin().knock_heard_ms()));
      if (std::chrono::steady_clock::now() > std::max(since, heard) + window)
        break;
      if (rj->back) {
        rj->knocking = false;
        log::info("rank {}: let back in", rank);
        return;
      }
      nd->rejoin().knock();
      nd.reset();
      std::this_thread::sleep_for(std::chrono::milliseconds(200)); // a knock's pace, not a wait for an event
    }
    log::warn("rank {}: not let back in (rank 0 silent for {:g} s): leaving the job ({})", rank, seconds, what);
    leave_now();
  }).detach();
}

} // namespace

namespace {

/// Whether the job's link carries frames by TCP alone (transport.tls, or
/// UCX_TLS): no shared memory to lend the actors' ring its chunks.
bool tcp_only(const run_config& cfg) {
  transport::ucx_options link;
  link.tls = cfg.transport_tls;
  return transport::ucx_setup::tls_tcp_only(transport::ucx_setup::effective_tls(link));
}

/// Whether this job's workers sum their buckets through the collective
/// communicator (topology.ring.allreduce; config.cpp refuses "collective" where
/// the actors' ring is needed).
bool sums_by_collective(const run_config& cfg, const topology_setup& setup) {
  if (!setup.family->sums_buckets || setup.workers < 2 || cfg.ring.path == actors::allreduce_path::actors ||
      !actors_ring_needed(cfg).empty())
    return false;
  // A rendezvous on the loopback (--procs) is one host, where the actors'
  // ring, lending chunks through shared memory, is the faster: no
  // communicator to open. Over TCP alone the communicator's own lanes are
  // the faster (bench/RESULTS.md, "Training's ring through the collective
  // communicator"). Elsewhere the hosts are known only once every rank has
  // joined (one_host).
  const auto& at = transport::detect_launch().rendezvous.host;
  const bool loopback = at == "127.0.0.1" || at == "localhost" || at == "::1";
  return cfg.ring.path == actors::allreduce_path::collective || !loopback || tcp_only(cfg);
}

/// Whether every rank of the job is on this host.
bool one_host(const job& jb) {
  return std::all_of(jb.hosts.begin(), jb.hosts.end(), [&jb](const std::string& h) { return h == jb.hosts.front(); });
}

/// The transport's options for this run's job.
job_options job_options_of(const run_config& cfg, topology_setup& setup) {
  job_options jo;
  jo.collective = sums_by_collective(cfg, setup);
  jo.comm_timeout_ms = static_cast<int>(setup.request_timeout().count()); // a round's bound, as the actors' ring's
  jo.tls = cfg.transport_tls;
  jo.spin_us = cfg.spin_us;
  // Workers that poll the link while they wait deliver their own frames;
  // the progress thread only covers their computing, and should not
  // preempt them at each frame (ucx_options::progress_nice).
  jo.progress_nice = cfg.progress_nice >= 0 ? cfg.progress_nice : (setup.spin_wait && cfg.spin_us == 0 ? 19 : 0);
  jo.shm_refs = cfg.shm_refs;
  jo.live.peer_timeout_ms = cfg.peer_timeout_ms;
  jo.replacements = setup.rejoin ? cfg.restarts : 0;
  jo.replacing = setup.replacing;
  jo.shape.latency_us = cfg.latency_us;
  jo.shape.bandwidth_gbps = cfg.bandwidth_gbps;
  if (!setup.faults.empty()) { // delay, drop and partition act here
    jo.shape.faults = std::make_shared<transport::link_faults>();
    setup.link_faults = jo.shape.faults;
  }
  // The largest data frame of this job: a final report, whose header (a
  // list per step, up to the link's 16 MiB header bound) travels in front
  // of the parameters and BatchNorm statistics; twice those, the header
  // bound and a MiB of slack. More from a peer is refused before it is
  // allocated.
  const models::model sizing(cfg.model, kernels::device::cpu(), cfg.seed);
  jo.max_data_bytes = 2 * (sizing.size() + static_cast<std::size_t>(sizing.state().numel())) * sizeof(float) +
                      transport::ucx_options{}.max_header_bytes + (std::size_t{1} << 20);
  return jo;
}

/// topology.ps.shard_placement = "per-host": a shard on each host's first
/// rank, hosts in the order of their first rank.
void place_shards_per_host(topology_setup& setup, const job& jb) {
  setup.shard_homes.clear();
  for (std::size_t r = 0; r < jb.hosts.size(); ++r)
    if (std::find(jb.hosts.begin(), jb.hosts.begin() + static_cast<std::ptrdiff_t>(r), jb.hosts[r]) ==
        jb.hosts.begin() + static_cast<std::ptrdiff_t>(r))
      setup.shard_homes.push_back(static_cast<int>(r));
  setup.ps.shards = static_cast<int>(setup.shard_homes.size());
  if (jb.launch.rank == 0)
    log::info("a parameter shard per host: {} shard(s)", setup.ps.shards);
}

/// Groups by host: shared memory within a host, the leaders' ring across
/// hosts; hosts of any rank counts, ranks in any placement. Every rank
/// reads the same table, so all agree.
void group_by_host(topology_setup& setup, const job& jb) {
  setup.ring.group_of = transport::host_numbers(jb.hosts);
  if (jb.launch.rank != 0)
    return;
  std::map<int, int> per_host;
  for (int h : setup.ring.group_of)
    ++per_host[h];
  int fewest = jb.launch.size, most = 0;
  for (const auto& [h, k] : per_host) {
    fewest = std::min(fewest, k);
    most = std::max(most, k);
  }
  const std::string counts = fewest == most ? std::to_string(most) : std::to_string(fewest) + " to " + std::to_string(most);
  log::info("hierarchical allreduce grouped by host: {} host(s) of {} rank(s)", per_host.size(), counts);
}

/// Where a rank that outlives rank 0 points its user: rank 0 held the
/// coordinator, the shards and the results, so the job ends; its
/// checkpoints are where a run goes on from.
std::string resume_hint_of(const run_config& cfg) {
  if (cfg.checkpoint_every <= 0 && cfg.checkpoint_every_s <= 0)
    return "no checkpoints were kept (train.checkpoint_every = 0): the run cannot be resumed";
  return "its checkpoints (every " +
         (cfg.checkpoint_every > 0 ? std::to_string(cfg.checkpoint_every) + " steps"
                                   : fmt::format("{:g} s", cfg.checkpoint_every_s)) +
         ") are in " + cfg.out + "/checkpoints on rank 0's host: `gradwire run --resume " + cfg.out +
         "` goes on from the latest complete one";
}

/// What this rank does when its transport finds a peer's process gone.
struct peer_failure {
  /// Weakly: the node keeps this callback, and a strong handle here would
  /// keep the node (and its UCX endpoints) alive forever.
  std::weak_ptr<transport::node> weak;
  int rank = 0;
  std::string resume_hint;
  bool peers_talk = false; ///< workers exchange with each other: rank 0 decides who goes
  std::shared_ptr<rejoining> rj;
  double rejoin_s = 0;
  /// The job's collective communicator where the ring sums through it:
  /// given up when a peer is lost, so that no sum waits out its timeout.
  transport::ucx_comm* comm = nullptr;

  void operator()(int peer, const std::string& what) const {
    auto node = weak.lock();
    if (!node)
      return; // the job is over
    if (comm)
      comm->abort("rank " + std::to_string(peer) + " is lost: " + what);
    actors::worker_report failed;
    failed.rank = peer;
    failed.error = "the process of rank " + std::to_string(peer) + " failed: " + what;
    if (rank == 0) // the coordinator fails the run naming the rank, or carries on without it
      tell_coordinator(*node, failed);
    else if (peer == 0)
      lost_rank_0(what, failed);
    else if (peers_talk) {
      failed.error = "rank " + std::to_string(rank) + " lost rank " + std::to_string(peer) + ": " + what;
      failed.reported_by = rank;
      tell_coordinator(*node, failed);
    }
  }

  /// To the coordinator, while there is one (during shutdown its slot is
  /// gone, and a rank dying then is no news).
  static void tell_coordinator(transport::node& node, const actors::worker_report& failed) {
    try {
      caf::anon_send(actors::as_coordinator(node.remote(0, transport::slots::coordinator)), actors::lost_atom::value, failed);
    } catch (const std::exception&) {
    }
  }

  /// The coordinator is gone, or has cut this rank off. Alive after a
  /// stall or a partition (not rank 0's end, not its process gone): ask to
  /// be let back in; else leave.
  void lost_rank_0(const std::string& what, const actors::worker_report& failed) const {
    if (rejoin_s > 0 && what.rfind("rank 0 ended", 0) != 0 && what.rfind("connection to rank", 0) != 0) {
      knock_until_back(weak, rank, rejoin_s, rj, "cut off from rank 0 (" + what + ")");
      return;
    }
    if (what.rfind("rank 0 ", 0) == 0) // its fence: cut off, or the job has ended
      log::warn("rank {}: leaving the job: {}", rank, what);
    else {
      log::warn("rank {}: stopping: {}", rank, failed.error);
      if (rank == 1)
        log::info("rank 0 held the coordinator, the shards and the results, so the job ends; {}", resume_hint);
    }
    leave_now();
  }
};

} // namespace

void join_across(caf::actor_system& sys, const run_config& cfg, topology_setup& setup, std::optional<job>& jb) {
  jb = join_job(sys, job_options_of(cfg, setup));
  const int rank = jb->launch.rank;
  setup.node = jb->node;
  setup.comm = jb->comm.get();
  setup.rank_hosts = transport::host_numbers(jb->hosts);
  if (setup.comm && cfg.ring.path == actors::allreduce_path::automatic && one_host(*jb) && !tcp_only(cfg))
    setup.comm = nullptr; // on one host the actors' ring, which lends buffers by reference, is the faster
  if (cfg.shards_per_host)
    place_shards_per_host(setup, *jb);
  if (setup.by_host && setup.family->has_groups)
    group_by_host(setup, *jb);
  setup.sync_ranks = [&sys, &jb, &setup](int epoch) { barrier(sys, *jb, epoch, static_cast<int>(setup.timeout.count())); };
  publish_barrier(sys, *jb);
  // How long a rank knocks after rank 0 last answered: a stalled one as
  // the config says, a replacement process (train.restarts) 30 s by default.
  const double rejoin_s = !setup.rejoin ? 0 : cfg.rejoin_s > 0 ? cfg.rejoin_s : setup.replacing ? 30 : 0;
  const peer_failure on_failure{jb->node,  rank, resume_hint_of(cfg), setup.family->peers_talk,
                                std::make_shared<rejoining>(), rejoin_s, setup.comm};
  const bool replacing = setup.replacing;
  setup.on_published = [&sys, &jb, rank, on_failure, replacing] {
    if (on_failure.rejoin_s > 0) {
      jb->node->rejoin().set_on_readmitted([rj = on_failure.rj] { rj->back = true; });
      jb->node->rejoin().set_on_dismissed([rank](const std::string& why) {
        log::warn("rank {}: leaving the job: {}", rank, why);
        leave_now(0); // the job is over: nothing for a launcher to restart
      });
    }
    jb->node->start(on_failure, jb->live);
    if (rank == 0)
      hear_launcher(jb->node);
    if (replacing) { // the others passed the start long ago: ask in, and wait to be re-formed into the ring
      knock_until_back(on_failure.weak, rank, on_failure.rejoin_s, on_failure.rj, "a new process for this rank");
      return;
    }
    barrier(sys, *jb, 0);
  };
}

} // namespace gradwire::scheduler
