// A hostile rank: joins a running job as a real rank would (the right
// token, the rendezvous, the barrier), then sends every kind of bad frame
// the job must survive, to rank 0 and rank 1, and leaves without a word.
// tests/transport/hostile_rank.sh runs it as rank 2 of an async parameter
// server, which must carry on without it and finish.
// With `silent SECONDS` it attacks by doing nothing: in the job, it keeps
// the link alive (heartbeats) and never steps, for SECONDS.
//   GRADWIRE_RANK=2 GRADWIRE_SIZE=3 GRADWIRE_RENDEZVOUS=... GRADWIRE_TOKEN=... gradwire-hostile-rank [silent SECONDS]
#include "actors/messages.hpp"
#include "actors/system_config.hpp"
#include "scheduler/runtime/job.hpp"
#include "transport/codec.hpp"
#include "transport/launch_env.hpp"
#include "transport/node.hpp"
#include "transport/rendezvous.hpp"
#include "transport/ucx_link.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace gradwire;

namespace {

constexpr std::uint64_t ref_marker = 0x475753484d524546ull, announce_marker = 0x475753484d414e4eull;

/// Every malformed frame kind, raw on the link, to `peer`.
void raw_attacks(transport::ucx_link& raw, int peer, std::uint64_t token) {
  raw.send(peer, {0x1111, 0x2222, 0x3333}, {});                                // garbage header
  raw.send(peer, {0x47574652, 0}, {});                                         // a truncated frame
  raw.send(peer, {ref_marker, token ^ 1, 2, 1, 0, 0, 4096}, {});               // a reference without the token
  raw.send(peer, {ref_marker, token, 2, 1, 2, std::uint64_t{1} << 40, 4096}, {}); // into memory never announced
  raw.send(peer, {announce_marker, token, 2, std::uint64_t{1} << 30, 5000}, {}); // an announcement with a huge name
  raw.send(peer, {1, 2}, kernels::tensor::zeros({std::int64_t{16} << 20}));      // a 64 MiB data frame
}

/// Well-formed messages with hostile fields, through proxies (the codec
/// encodes them as a real rank would).
void message_attacks(transport::node& nd) {
  auto coordinator = nd.remote(0, transport::slots::coordinator);
  caf::anon_send(coordinator, actors::step_atom::value, 50000000, std::int64_t{5}, std::int64_t{5});
  actors::step_metrics m;
  m.rank = -7;
  caf::anon_send(coordinator, actors::metrics_atom::value, m);
  actors::worker_report rep;
  rep.rank = 50000000;
  caf::anon_send(coordinator, actors::done_atom::value, rep);
  caf::anon_send(coordinator, actors::lost_atom::value, rep);
  caf::anon_send(nd.remote(0, transport::slots::user(5)), actors::step_atom::value, 1); // nothing published there
  caf::anon_send(nd.remote(0, transport::slots::shard(0)), actors::push_atom::value, 50000000, std::int64_t{0},
                 std::int64_t{0}, std::int64_t{64}, actors::slice::zeros({3})); // a push of the wrong size and rank
}

} // namespace

int main(int argc, char** argv) {
  const bool silent = argc == 3 && std::string(argv[1]) == "silent";
  caf::actor_system_config cfg;
  actors::configure_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
  scheduler::job j;
  j.launch = transport::detect_launch();
  const auto token = transport::token_hash(j.launch.rendezvous.token);
  transport::ucx_options uo;
  uo.token_hash = token;
  auto link = std::make_unique<transport::ucx_link>(j.launch.rank, j.launch.size, uo);
  link->connect(transport::rendezvous(j.launch.rank, j.launch.size, j.launch.rendezvous, link->address()));
  auto* raw = link.get();
  j.node = std::make_shared<transport::node>(sys, std::move(link), j.launch.rendezvous.token);
  scheduler::publish_barrier(sys, j);
  j.node->start([](int, const std::string&) {});
  scheduler::barrier(sys, j, 0); // as the real ranks do once their actors are published
  std::fprintf(stderr, "hostile rank %d: in the job, attacking\n", j.launch.rank);
  if (silent) { // heartbeats only, from the node's own thread
    std::fprintf(stderr, "hostile rank %d: silent, heartbeats only\n", j.launch.rank);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(std::atoi(argv[2])));
    std::_Exit(0);
  }
  for (int peer = 0; peer < 2; ++peer)
    raw_attacks(*raw, peer, token);
  message_attacks(*j.node);
  std::this_thread::sleep_for(std::chrono::milliseconds(500)); // let the frames leave
  std::fprintf(stderr, "hostile rank %d: leaving without a word\n", j.launch.rank);
  std::fflush(stderr);
  std::_Exit(0);
}
