#include "actors/gossip_mixer.hpp"

#include "actors/worker_core.hpp"
#include "kernels/backend.hpp"

#include <string>

namespace gradwire::actors {

/// x <- (x + theirs) / 2.
void average_into(slice& x, const slice& theirs) {
  auto& be = kernels::backend_for(kernels::device::cpu());
  be.scale(static_cast<std::size_t>(x.numel()), 0.5f, x.data());
  be.axpy(static_cast<std::size_t>(x.numel()), 0.5f, theirs.data(), x.data());
}

namespace {

struct mixer_state {
  std::shared_ptr<gossip_store> store;
  static inline const char* name = "gossip_mixer";
};

/// The passive side of AD-PSGD: replies with x_j, then x_j = (x_j + x_i) / 2.
caf::behavior mixer_behavior(caf::stateful_actor<mixer_state>* self, std::shared_ptr<gossip_store> store) {
  self->state.store = std::move(store);
  return {
    [self](gossip_atom, int rank, const slice& theirs) -> caf::result<slice> {
      auto& st = *self->state.store;
      std::lock_guard<std::mutex> lk(st.mu);
      if (st.closed)
        return caf::make_error(caf::sec::request_receiver_down);
      if (theirs.numel() != st.x.numel())
        return caf::make_error(caf::sec::runtime_error, "AD-PSGD: rank " + std::to_string(rank) + " sent " +
                                                          std::to_string(theirs.numel()) + " parameters, expected " +
                                                          std::to_string(st.x.numel()));
      auto mine = copy_of(st.x);
      average_into(st.x, theirs);
      return mine;
    },
  };
}

} // namespace

caf::actor spawn_gossip_mixer(caf::actor_system& sys, std::shared_ptr<gossip_store> store) {
  return sys.spawn(mixer_behavior, std::move(store));
}

} // namespace gradwire::actors
