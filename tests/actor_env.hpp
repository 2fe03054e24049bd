#pragma once
// One actor system per test case (or per emulated process), shut down at
// its end: a static one outlived CAF's own globals and corrupted the heap
// at exit.
#include "actors/system_config.hpp"

#include <caf/all.hpp>

#include <memory>

namespace gwtest {

struct actor_env {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  explicit actor_env(int threads = 2) {
    gradwire::actors::configure_scheduler(cfg, threads);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

} // namespace gwtest
