#include "actors/collective_peer.hpp"
#include "actors/worker_protocol.hpp"

#include "actors/refuse.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/denormals.hpp"
#include "kernels/error.hpp"

#include <exception>
#include <string>

namespace gradwire::actors {

namespace {

struct collective_state {
  collective_peer_config cfg;
  trace_ref tr;
  static inline const char* name = "collective_peer";
};

using collective_actor = reducer_actor::stateful_base<collective_state>;

/// Sums one bucket and hands it back to the worker, scaled (the mean).
void reduce(collective_actor* self, std::int64_t round, int bucket, slice view, float scale) {
  auto& st = self->state;
  auto worker = caf::actor_cast<caf::actor>(self->current_sender());
  // The worker is dynamically typed: a typed actor answers it as itself, untyped.
  const auto me = caf::actor_cast<caf::actor>(self);
  try {
    check(bucket >= 0 && static_cast<std::size_t>(bucket) < st.cfg.buckets.size(),
          "ring peer " + std::to_string(st.cfg.rank) + ": bucket " + std::to_string(bucket) + " of " +
            std::to_string(st.cfg.buckets.size()));
    const auto [b, e] = st.cfg.buckets[static_cast<std::size_t>(bucket)];
    check(view.defined() && static_cast<std::size_t>(view.numel()) == e - b,
          "ring peer " + std::to_string(st.cfg.rank) + ": bucket " + std::to_string(bucket) + " is " +
            std::to_string(e - b) + " floats, got " + std::to_string(view.defined() ? view.numel() : 0));
    const auto t0 = st.tr.now();
    st.cfg.allreduce(view.data(), e - b);
    if (scale != 1.f)
      kernels::backend_for(kernels::device::cpu()).scale(e - b, scale, view.data());
    st.tr.since("allreduce (arg: bucket)", t0, bucket);
    caf::send_as(me, as_reduced_taker(worker), reduced_atom::value, round, bucket, pieces{piece{b, std::move(view)}}, 0.0);
  } catch (const std::exception& ex) {
    caf::send_as(me, as_reduced_taker(worker), reduce_failed_atom::value, round, std::string(ex.what()));
  }
}

reducer_actor::behavior_type collective_behavior(collective_actor* self, collective_peer_config cfg) {
  refuse_unexpected(self, "ring peer " + std::to_string(cfg.rank));
  self->state.tr = trace_ref::open(cfg.trace, "ring peer " + std::to_string(cfg.rank));
  self->state.cfg = std::move(cfg);
  return {
    [=](reduce_atom, std::int64_t round, int bucket, slice view, float scale) {
      kernels::flush_denormals_on_this_thread();
      reduce(self, round, bucket, std::move(view), scale);
    },
  };
}

} // namespace

reducer_actor spawn_collective_peer(caf::actor_system& sys, collective_peer_config cfg) {
  return sys.spawn<caf::detached>(collective_behavior, std::move(cfg));
}

} // namespace gradwire::actors
