#include "actors/allreduce_driver.hpp"

#include "actors/messages.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

namespace gradwire::actors {

float allreduce_input(int rank, std::size_t i) { return static_cast<float>(rank + 1) * static_cast<float>(i % 13 + 1); }

float allreduce_expected(int ranks, std::size_t i) {
  return static_cast<float>(ranks * (ranks + 1) / 2) * static_cast<float>(i % 13 + 1);
}

namespace {

caf::behavior driver(caf::event_based_actor* self, allreduce_driver_config cfg) {
  struct state {
    slice buf;
    std::int64_t round = 0;
    int pending = 0, iter = 0;
    bool checking = true;
    std::chrono::steady_clock::time_point t0;
    allreduce_result res;
  };
  auto st = std::make_shared<state>();
  const auto floats = cfg.floats;
  st->buf = slice::empty({static_cast<std::int64_t>(floats)});
  for (std::size_t i = 0; i < floats; ++i)
    st->buf.data()[i] = allreduce_input(cfg.rank, i);
  auto launch = [self, peer = cfg.peer, st, floats] {
    st->pending = 1;
    self->send(peer, reduce_atom::value, st->round, 0, st->buf.view(0, {static_cast<std::int64_t>(floats)}), 1.f);
  };
  launch();
  return {
    [=](reduced_atom, std::int64_t, int, const pieces& got, double) {
      if (st->checking) {
        std::size_t covered = 0;
        for (const auto& p : got) {
          const float* d = p.data.data();
          for (std::int64_t k = 0; k < p.data.numel(); ++k)
            st->res.max_error = std::max<double>(
              st->res.max_error, std::fabs(d[k] - allreduce_expected(cfg.ranks, p.offset + static_cast<std::size_t>(k))));
          covered += static_cast<std::size_t>(p.data.numel());
        }
        if (covered != floats)
          st->res.error = "result covers " + std::to_string(covered) + " of " + std::to_string(floats) + " floats";
      }
      if (--st->pending > 0)
        return;
      ++st->round;
      if (st->checking) { // timed rounds run on zeros, which stay zeros (sums in place)
        st->checking = false;
        std::memset(st->buf.data(), 0, floats * sizeof(float));
        st->t0 = std::chrono::steady_clock::now();
      } else if (++st->iter == cfg.warmup) {
        st->t0 = std::chrono::steady_clock::now();
      }
      if (st->iter == cfg.warmup + cfg.iters) {
        st->res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - st->t0).count() / cfg.iters;
        cfg.done(st->res);
        self->quit();
        return;
      }
      launch();
    },
    [=](reduce_failed_atom, std::int64_t, const std::string& err) {
      st->res.error = err;
      cfg.done(st->res);
      self->quit();
    },
  };
}

} // namespace

caf::actor spawn_allreduce_driver(caf::actor_system& sys, allreduce_driver_config cfg) {
  return sys.spawn(driver, std::move(cfg));
}

} // namespace gradwire::actors
