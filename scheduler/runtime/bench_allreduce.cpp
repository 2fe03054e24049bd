#include "scheduler/runtime/bench_allreduce.hpp"
#include "actors/reduce_protocol.hpp"
#include "kernels/log.hpp"

#include "actors/allreduce_driver.hpp"
#include "actors/messages.hpp"
#include "actors/ring_allreduce.hpp"
#include "actors/ring_peer.hpp"
#include "actors/system_config.hpp"
#include "transport/shm_arena.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

namespace gradwire::scheduler {

std::size_t parse_bytes(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  check(end != text.c_str() && v > 0, what + " '" + text + "': expected a size such as 256K, 4M or 1G");
  double mult = 1;
  const std::string unit(end);
  if (unit == "K" || unit == "k" || unit == "KiB")
    mult = 1024;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else
    check(unit.empty() || unit == "B", what + " '" + text + "': unknown unit '" + unit + "' (use K, M or G)");
  return static_cast<std::size_t>(v * mult);
}

namespace {

std::string human(std::size_t bytes) {
  char b[32];
  if (bytes >= (1u << 20))
    std::snprintf(b, sizeof b, "%zuM", bytes >> 20);
  else if (bytes >= 1024)
    std::snprintf(b, sizeof b, "%zuK", bytes >> 10);
  else
    std::snprintf(b, sizeof b, "%zu", bytes);
  return b;
}

} // namespace

namespace {

std::vector<std::size_t> sizes_of(const allreduce_bench_options& o) {
  check(o.min_bytes >= 4 && o.max_bytes >= o.min_bytes, "bench allreduce: need 4 <= min size <= max size");
  for (const auto& [flag, v] : {std::pair<const char*, std::size_t>{"-b", o.min_bytes}, {"-e", o.max_bytes}})
    check(v % 4 == 0, std::string("bench allreduce: ") + flag + " " + std::to_string(v) +
                        " bytes is not a whole number of floats (4 bytes each): use " + std::to_string(v / 4 * 4) +
                        " or " + std::to_string(v / 4 * 4 + 4));
  check(o.factor > 1, "bench allreduce: the factor must be > 1");
  check(o.iters >= 1 && o.warmup >= 0, "bench allreduce: iterations must be >= 1, warm-up >= 0");
  transport::parse_comm_net(o.job.comm_net, "--net"); // before any process starts
  std::vector<std::size_t> sizes;
  for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes) * 1.0001; s *= o.factor)
    sizes.push_back(static_cast<std::size_t>(s) / 4 * 4);
  return sizes;
}

/// A benchmark owns the machine: it polls through the gaps unless told.
job_options bench_job_options(const allreduce_bench_options& o) {
  auto jo = o.job;
  if (jo.spin_us < 0) {
    const auto li = transport::detect_launch();
    const bool shared = li.size > static_cast<int>(std::thread::hardware_concurrency());
    // Ranks that share CPUs poll too, but yield between polls (as MPI
    // does when oversubscribed): sleeping in the kernel instead costs each
    // hop a wake-up.
    jo.spin_us = shared ? 3000 : 1000;
    jo.spin_yield = jo.spin_yield || shared;
  }
  jo.max_data_bytes = 2 * std::max(o.max_bytes, o.chunk_bytes) + (std::size_t{1} << 20); // the largest size's frames
  jo.collective = o.engine != "actors";
  jo.ring_from_bytes = o.ring_from_bytes;
  return jo;
}

/// One ring peer per size, published in its slot.
std::vector<caf::actor> spawn_bench_peers(caf::actor_system& sys, job& j, const allreduce_bench_options& o,
                                          const std::vector<std::size_t>& sizes) {
  const int rank = j.launch.rank, n = j.launch.size;
  std::vector<caf::actor> peers;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::size_t floats = sizes[k] / 4;
    actors::ring_peer_config pc;
    pc.rank = rank;
    pc.world = n;
    pc.buckets = actors::make_buckets(floats, floats);
    pc.chunk_floats = std::max<std::size_t>(1, o.chunk_bytes / 4);
    pc.direct = o.algo == "direct" || (o.algo == "auto" && n > 2 && sizes[k] < o.direct_below);
    peers.push_back(actors::spawn_ring_peer(sys, pc));
    j.node->publish(transport::slots::bench_peer(static_cast<int>(k)), peers.back());
  }
  return peers;
}

/// Once every rank has published: each peer's right neighbour and, for
/// the direct algorithm, every rank's peer.
void wire_bench_peers(job& j, const std::vector<caf::actor>& peers) {
  const int rank = j.launch.rank, n = j.launch.size;
  for (std::size_t k = 0; k < peers.size(); ++k) {
    const auto slot = transport::slots::bench_peer(static_cast<int>(k));
    auto right = j.node->remote((rank + 1) % n, slot);
    std::vector<caf::actor> all;
    for (int r = 0; r < n; ++r)
      all.push_back(r == rank ? peers[k] : j.node->remote(r, slot));
    caf::anon_send(actors::as_ring_peer(peers[k]), actors::peer_wire_atom::value, right, caf::actor{}, all);
  }
}

void print_header(const allreduce_bench_options& o, const job& j) {
  const int n = j.launch.size;
  const std::string actors_algo =
    o.algo == "auto" ? (n > 2 ? "direct below " + human(o.direct_below) + ", ring above" : "ring") : o.algo;
  if (j.comm) {
    std::printf("# gradwire allreduce: %d process%s, MPI semantics (the sum in each rank's own buffer, every byte "
                "copied): %s%s; %d warm-up + %d timed rounds per size\n",
                n, n == 1 ? "" : "es", j.comm->describe().c_str(),
                o.comm_algo == "auto" ? "" : (", forced: " + o.comm_algo).c_str(), o.warmup, o.iters);
    if (o.engine == "both")
      std::printf("# extra, after the bar (not MPI's semantics): the actors' ring allreduce (%s), %s, chunk %s; "
                  "results read in place\n",
                  actors_algo.c_str(), j.node->transport().describe().c_str(), human(o.chunk_bytes).c_str());
  } else {
    std::printf("# gradwire allreduce (%s): %d process%s, %s, chunk %s, %d warm-up + %d timed rounds per size\n",
                actors_algo.c_str(), n, n == 1 ? "" : "es", j.node->transport().describe().c_str(),
                human(o.chunk_bytes).c_str(), o.warmup, o.iters);
  }
  std::printf("%12s %12s %12s %12s %12s %8s", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check");
  if (j.comm && o.engine == "both")
    std::printf("  | %12s %12s %8s", "actors(us)", "busbw(GB/s)", "check");
  std::printf("\n");
  std::fflush(stdout);
}

struct row {
  double seconds = 0;
  bool ok = false;
};

/// The communicator at one size: a check round, then warm-up and timed
/// rounds on zeros (which stay zeros), each rank's time from a barrier.
row comm_size(transport::ucx_comm& comm, const allreduce_bench_options& o, std::size_t bytes) {
  const int rank = comm.rank(), n = comm.size();
  const std::size_t floats = bytes / 4;
  const auto algo = transport::parse_allreduce_algo(o.comm_algo, "--comm-algo");
  std::vector<float> buf(floats);
  for (std::size_t i = 0; i < floats; ++i)
    buf[i] = actors::allreduce_input(rank, i);
  comm.allreduce(buf.data(), floats, algo);
  row r;
  double worst = 0;
  for (std::size_t i = 0; i < floats; ++i)
    worst = std::max<double>(worst, std::fabs(buf[i] - actors::allreduce_expected(n, i)));
  r.ok = worst == 0;
  if (!r.ok)
    log::warn("rank {}: the communicator's allreduce of {} is wrong (max error {:g})", rank, human(bytes), worst);
  std::fill(buf.begin(), buf.end(), 0.f);
  for (int i = 0; i < o.warmup; ++i)
    comm.allreduce(buf.data(), floats, algo);
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i)
    comm.allreduce(buf.data(), floats, algo);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.iters;
  return r;
}

/// One engine's cells of a row: time, algbw (the headline only), busbw, check.
void print_cells(std::size_t bytes, int n, const row& r, bool headline) {
  const double algbw = static_cast<double>(bytes) / r.seconds / 1e9;
  if (headline)
    std::printf(" %12.1f %12.3f", r.seconds * 1e6, algbw);
  else
    std::printf("  | %12.1f", r.seconds * 1e6);
  std::printf(" %12.3f %8s", algbw * 2.0 * (n - 1) / n, r.ok ? "ok" : "WRONG");
}

/// One size through the actors: its driver's check and timed rounds.
row actors_size(caf::actor_system& sys, const job& j, const allreduce_bench_options& o, const caf::actor& peer,
                std::size_t bytes) {
  const int rank = j.launch.rank, n = j.launch.size;
  auto done = std::make_shared<std::promise<actors::allreduce_result>>();
  auto fut = done->get_future();
  actors::allreduce_driver_config dc;
  dc.peer = peer;
  dc.floats = bytes / 4;
  dc.rank = rank;
  dc.ranks = n;
  dc.warmup = o.warmup;
  dc.iters = o.iters;
  dc.done = [done](const actors::allreduce_result& r) { done->set_value(r); };
  actors::spawn_allreduce_driver(sys, std::move(dc));
  const auto bound = std::chrono::seconds(60);
  if (fut.wait_for(bound) != std::future_status::ready)
    throw error("rank " + std::to_string(rank) + ": allreduce of " + human(bytes) + " did not finish within " +
                std::to_string(bound.count()) + " s");
  auto r = fut.get();
  const bool ok = r.error.empty() && r.max_error == 0;
  if (!ok)
    log::warn("rank {}: allreduce of {} is wrong: {} (max error {:g})", rank, human(bytes), r.error, r.max_error);
  return row{r.seconds, ok};
}

} // namespace

namespace {

/// The communicator at one size; a failure is a peer that died or
/// misbehaved: the node names it within its liveness bound (and ends the
/// process, status 3); until then, say what the communicator saw.
row comm_row(const job& j, const allreduce_bench_options& o, std::size_t bytes) {
  try {
    return comm_size(*j.comm, o, bytes);
  } catch (const std::exception& e) {
    log::warn("rank {}: {}", j.launch.rank, e.what());
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * j.live.peer_timeout_ms + 1000));
    log::warn("rank {}: bench aborted: no rank was reported lost", j.launch.rank);
    std::fflush(stderr);
    transport::unlink_arenas();
    std::_Exit(3);
  }
}

/// Rank 0's line for one size: bytes, floats, then each engine's cells.
void print_size(std::size_t bytes, int ranks, const std::vector<row>& rows) {
  std::printf("%12zu %12zu", bytes, bytes / 4);
  for (std::size_t i = 0; i < rows.size(); ++i)
    print_cells(bytes, ranks, rows[i], i == 0);
  std::printf("\n");
  std::fflush(stdout);
}

} // namespace

int bench_allreduce(const allreduce_bench_options& o) {
  const auto sizes = sizes_of(o);
  caf::actor_system_config cfg;
  gradwire::actors::configure_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
  auto j = join_job(sys, bench_job_options(o));
  const int rank = j.launch.rank;
  publish_barrier(sys, j);
  const auto peers = o.engine == "comm" ? std::vector<caf::actor>{} : spawn_bench_peers(sys, j, o, sizes);
  std::atomic<bool> finishing{false}; // after the last size, peers leave at their own pace
  j.node->start([&](int r, const std::string& what) {
    if (finishing)
      return;
    log::warn("rank {}: bench aborted: rank {} failed ({})", rank, r, what);
    std::fflush(stderr);
    transport::unlink_arenas(); // no destructors run from here
    std::_Exit(3);
  });
  wire_bench_peers(j, peers);
  barrier(sys, j, 0);
  if (rank == 0)
    print_header(o, j);
  int status = 0;
  if (j.comm) { // endpoints are wired up by their first messages: not inside the first size's rounds
    std::vector<float> w(16384, 0.f);
    for (int i = 0; i < 200; ++i)
      j.comm->allreduce(w.data(), i % 2 ? w.size() : 1);
  }
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    std::vector<row> rows;
    if (j.comm)
      rows.push_back(comm_row(j, o, sizes[k]));
    if (o.engine != "comm")
      rows.push_back(actors_size(sys, j, o, peers[k], sizes[k]));
    for (const auto& r : rows)
      if (!r.ok)
        status = 4;
    if (rank == 0)
      print_size(sizes[k], j.launch.size, rows);
  }
  finishing = true;
  j.node->ending();
  barrier(sys, j, 1);
  j.node->close();
  for (auto& p : peers)
    caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
  return status;
}

} // namespace gradwire::scheduler
