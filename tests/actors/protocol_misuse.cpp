// Compiled by protocol_misuse.sh, never linked. With MISUSE = 0 it holds
// correct uses of the typed protocols (the shard's, the allreduce peer's,
// the job barrier's, AD-PSGD's mixer's, the coordinator's, a ring's
// reformer's, the workers' and virtual time's reformer's, and a worker's
// behavior checked against its family's list) and must compile; each
// other value
// is one wrong use that the compiler must refuse.
#include "actors/barrier.hpp"
#include "actors/coordinator_protocol.hpp"
#include "actors/gossip_mixer.hpp"
#include "actors/reduce_protocol.hpp"
#include "actors/shard_protocol.hpp"
#include "actors/worker_protocol.hpp"
#include "scheduler/runtime/virtual_reform.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>

using namespace gradwire::actors;
using gradwire::scheduler::virtual_reformer_actor;

/// The workers' handles, one of each family.
struct workers {
  worker_actor any;
  ps_worker_actor ps;
  ring_worker_actor ring;
  compressed_worker_actor compressed;
  gossip_worker_actor gossip;
};

/// One handle of each typed protocol.
struct handles {
  shard_actor shard;
  reducer_actor peer;
  barrier_actor root;
  gossip_mixer_actor mixer;
  coordinator_actor coordinator;
  reformer_actor reformer;
  workers w;
  virtual_reformer_actor vreformer;
};

#if MISUSE == 0
void correct_uses(caf::event_based_actor* self, const handles& h) {
  const auto& [shard, peer, root, mixer, coordinator, reformer, w, vreformer] = h;
  const std::chrono::seconds t{1};
  const std::int64_t zero = 0, samples = 16;
  self->request(shard, t, pull_atom::value, 0, zero, zero).then([](std::int64_t, slice, double) {});
  self->request(shard, t, push_atom::value, 0, zero, zero, samples, slice{}).then([](std::int64_t, std::int64_t) {});
  self->send(shard, pin_atom::value, zero);
  self->send(shard, reform_atom::value, 1, std::vector<std::int64_t>{0, 2});
  self->send(peer, reduce_atom::value, zero, 0, slice{}, 1.f);
  self->send(root, barrier_atom::value, 0, 1, caf::actor_cast<caf::actor>(self));
  self->request(root, t, barrier_missing_atom::value, 0).then([](const std::string&) {});
  self->request(mixer, t, average_atom::value, 0, zero, slice{}).then([](slice) {});
  self->send(coordinator, step_atom::value, 0, zero, samples);
  self->send(coordinator, done_atom::value, worker_report{});
  self->send(coordinator, paused_atom::value, 0, zero);
  self->send(reformer, adopted_atom::value, 0, 1);
  self->send(w.any, run_to_atom::value, zero);
  self->send(w.ps, replica_atom::value, zero);
  self->send(w.ps, stop_atom::value);
  self->send(w.ring, abandon_atom::value, 1);
  self->send(w.ring, wire_atom::value, caf::actor{}, std::vector<caf::actor>{});
  self->send(w.compressed, gather_atom::value, zero, 0, 1, slice{});
  self->send(w.gossip, wire_atom::value, std::vector<caf::actor>{});
  self->send(w.gossip, reform_atom::value, 1, std::vector<std::int64_t>{0, 2});
  self->send(vreformer, lost_atom::value, worker_report{});
  self->send(vreformer, abandoned_atom::value, 0, zero, true);
  self->send(w.ring, reduce_failed_atom::value, zero, std::string("ring peer 1: lost"));
}
#endif

void use(caf::event_based_actor* self, const handles& h) {
  const auto& [shard, peer, root, mixer, coordinator, reformer, w, vreformer] = h;
  const std::chrono::seconds t{1};
  const std::int64_t zero = 0, samples = 16;
#if MISUSE == 1 // a reform's generation as a 64-bit integer
  self->send(shard, reform_atom::value, zero, std::vector<std::int64_t>{0, 2});
#elif MISUSE == 2 // a pin sent as a snapshot with a flag
  self->send(shard, snapshot_atom::value, zero, true);
#elif MISUSE == 3 // a push's samples as an int
  self->request(shard, t, push_atom::value, 0, zero, zero, 16, slice{}).then([](std::int64_t, std::int64_t) {});
#elif MISUSE == 4 // a ring worker's message sent to a shard
  self->send(shard, hold_at_atom::value, zero);
#elif MISUSE == 5 // a push's reply taken as a push-pull's
  self->request(shard, t, push_atom::value, 0, zero, zero, samples, slice{})
    .then([](std::int64_t, std::int64_t, slice) {});
#elif MISUSE == 6 // a pull's reply without the seconds it was held
  self->request(shard, t, pull_atom::value, 0, zero, zero).then([](std::int64_t, slice) {});
#elif MISUSE == 8 // a bucket's scale as a double
  self->send(peer, reduce_atom::value, zero, 0, slice{}, 1.0);
#elif MISUSE == 9 // a shard's message sent to an allreduce peer
  self->send(peer, pin_atom::value, zero);
#elif MISUSE == 10 // a barrier's epoch as a 64-bit integer
  self->send(root, barrier_atom::value, zero, 1, caf::actor_cast<caf::actor>(self));
#elif MISUSE == 11 // the barrier's missing ranks taken as a list of ints
  self->request(root, t, barrier_missing_atom::value, 0).then([](const std::vector<int>&) {});
#elif MISUSE == 12 // an average's step as an int
  self->request(mixer, t, average_atom::value, 0, 5, slice{}).then([](slice) {});
#elif MISUSE == 13 // a worker's step count as an int
  self->send(coordinator, step_atom::value, 0, 5, samples);
#elif MISUSE == 14 // a shard's message sent to the coordinator
  self->send(coordinator, pin_atom::value, zero);
#elif MISUSE == 15 // a worker's progress sent to a ring's reformer
  self->send(reformer, step_atom::value, 0, zero, samples);
#elif MISUSE == 16 // a lost worker named by its rank alone, not its report
  self->send(coordinator, lost_atom::value, 1);
#elif MISUSE == 17 // a worker's last step as an int
  self->send(w.any, run_to_atom::value, 5);
#elif MISUSE == 18 // a ring worker's re-form sent to a parameter-server worker
  self->send(w.ps, abandon_atom::value, 1);
#elif MISUSE == 19 // a gossip worker wired as a ring worker is
  self->send(w.gossip, wire_atom::value, caf::actor{}, std::vector<caf::actor>{});
#elif MISUSE == 20 // the coordinator's message sent to a worker
  self->send(w.ring, step_atom::value, 0, zero, samples);
#elif MISUSE == 21 // a compressed payload sent to a plain ring worker
  self->send(w.ring, gather_atom::value, zero, 0, 1, slice{});
#elif MISUSE == 22 // a kill named to virtual time's reformer by its rank alone
  self->send(vreformer, lost_atom::value, 1);
#elif MISUSE == 23 // a bucket's failure sent as a reduced bucket
  self->send(w.ring, reduced_atom::value, zero, std::string("ring peer 1: lost"));
#endif
}

/// A Streaming DiLoCo worker's behavior: the shared controls, its
/// heartbeat, its re-form, then what a case adds. Each handler does nothing.
template <class... More>
caf::behavior streaming_worker(More... more) {
  return checked_behavior<streaming_worker_actor>(
    [](stop_atom) {}, [](pause_atom) {}, [](run_to_atom, std::int64_t) {}, [](snapshot_at_atom, std::int64_t) {},
    [](tick_atom) {}, [](computed_atom) {}, std::move(more)...);
}

#if MISUSE == 0
caf::behavior whole_worker() {
  return streaming_worker([](beat_atom) {}, [](reform_atom, int, std::vector<std::int64_t>) {});
}
#elif MISUSE == 24 // a worker's behavior that forgets a message of its family's list (the re-form)
caf::behavior forgetful_worker() { return streaming_worker([](beat_atom) {}); }
#elif MISUSE == 25 // a worker's behavior with a handler its family's list does not name
caf::behavior overeager_worker() {
  return streaming_worker([](beat_atom) {}, [](reform_atom, int, std::vector<std::int64_t>) {},
                          [](gossip_atom, std::int64_t, int, slice) {});
}
#elif MISUSE == 26 // a worker's handler that takes a message's payload as another type (the generation as int64)
caf::behavior mistyped_worker() {
  return streaming_worker([](beat_atom) {}, [](reform_atom, std::int64_t, std::vector<std::int64_t>) {});
}
#endif

#if MISUSE == 7 // a shard that forgets a message of its protocol
shard_actor::behavior_type incomplete() {
  return {
    [](pin_atom, std::int64_t) {},
  };
}
#endif
