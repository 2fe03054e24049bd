#pragma once
// What the virtual-time tests share: a virtual run in an actor system of
// its own, a bit-for-bit comparison, a constant compute model and a small
// async setup.
#include "scheduler/runtime/virtual_time.hpp"
#include "topology_support.hpp"

#include <cstring>
#include <memory>
#include <vector>

namespace gwtest {

/// One virtual run in an actor system of its own.
inline scheduler::topology_outcome run_virtual(scheduler::topology_setup setup, const models::dataset& data, scheduler::virtual_setup vs,
                                        std::shared_ptr<scheduler::simulation>* keep = nullptr) {
  caf::actor_system_config cfg;
  scheduler::configure_virtual(cfg);
  caf::actor_system sys{cfg};
  setup.sim = scheduler::simulation::make(sys, std::move(vs));
  auto out = scheduler::run_topology(sys, setup, data);
  if (keep)
    *keep = setup.sim;
  return out;
}

/// The same parameters, bit for bit.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline scheduler::virtual_setup constant_compute(double step_s, int workers_per_host, int hosts) {
  scheduler::virtual_setup vs;
  scheduler::compute_model c;
  c.step_s = step_s;
  vs.compute = {c};
  vs.workers_per_host = workers_per_host;
  vs.hosts = hosts;
  return vs;
}

/// A [[faults]] strike of `kind` on `rank` after its step `at_step`
/// (0: at `at_seconds` of its clock).
inline scheduler::fault_strike strike(scheduler::fault_kind kind, int rank, std::int64_t at_step, double at_seconds = -1) {
  scheduler::fault_strike f;
  f.kind = kind;
  f.ranks = {rank};
  f.at_step = at_step;
  f.at_seconds = at_seconds;
  return f;
}

inline scheduler::topology_setup tiny_async(int workers, int steps) {
  auto s = small_setup(workers, 1, false);
  s.spec.hidden = {8};
  s.opt.momentum = 0.f;
  s.batch_size = 4;
  s.steps = steps;
  s.log_every = 1000;
  return s;
}

} // namespace gwtest
