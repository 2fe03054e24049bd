#include "scheduler/app/config_virtual.hpp"

#include "kernels/error.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <algorithm>

namespace gradwire::scheduler {

namespace {

/// virtual.host_workers: each host's worker count (hosts of different sizes).
void read_host_workers(config_toml::reader& r, run_config& c, int hosts) {
  auto& v = c.virt;
  v.host_workers.clear();
  const auto& per_host = r.get("virtual.host_workers");
  if (const auto* list = per_host.as_array(); list != nullptr && !list->empty()) {
    check(hosts == 0 && r.integer("virtual.workers_per_host") == 0,
          r.loc("virtual.host_workers") + ": gives each host's workers; leave virtual.hosts and "
                                           "virtual.workers_per_host unset (0) with it");
    check(list->size() <= static_cast<std::size_t>(c.workers),
          r.loc("virtual.host_workers") + ": " + std::to_string(list->size()) + " hosts for topology.workers = " +
            std::to_string(c.workers) + " (each host holds 1 worker or more)");
    int sum = 0;
    for (const auto& e : *list) {
      const auto k = e.value<std::int64_t>().value_or(0);
      check(k >= 1 && k <= 1024, r.loc("virtual.host_workers") + ": each host holds 1 to 1024 workers, got " +
                                   std::to_string(k));
      v.host_workers.push_back(static_cast<int>(k));
      sum += static_cast<int>(k);
    }
    check(sum == c.workers, r.loc("virtual.host_workers") + ": the hosts hold " + std::to_string(sum) +
                              " workers, but topology.workers = " + std::to_string(c.workers));
    v.hosts = static_cast<int>(v.host_workers.size());
    v.workers_per_host = *std::max_element(v.host_workers.begin(), v.host_workers.end());
  }
}

/// virtual.host_bandwidth_gbps: each host's NIC.
void read_host_bandwidth(config_toml::reader& r, run_config& c) {
  auto& v = c.virt;
  v.host_gbps.clear();
  if (const auto* list = r.get("virtual.host_bandwidth_gbps").as_array(); list != nullptr && !list->empty()) {
    check(list->size() == static_cast<std::size_t>(v.hosts),
          r.loc("virtual.host_bandwidth_gbps") + ": " + std::to_string(list->size()) + " entries for " +
            std::to_string(v.hosts) + " host(s) (one per host)");
    for (const auto& e : *list) {
      const double g = e.value<double>().value_or(0);
      check(g > 0 && g <= 1e6, r.loc("virtual.host_bandwidth_gbps") + ": each NIC's Gb/s must be in (0, 1e6], got " +
                                  std::to_string(g));
      v.host_gbps.push_back(g);
    }
  }
}

/// Why a kill cannot be simulated in `c` ("" when it can): in virtual time
/// a killed worker ends at its step boundary and the survivors hear of it
/// at that time, as from the coordinator in a real run; a flat ring
/// re-forms inside the simulation (and only a ring lets a worker back in).
std::string why_no_kill(const run_config& c, const fault_spec& f) {
  const bool ring = c.family == &ring_family;
  if (f.back_at_step > 0 && !ring)
    return "back_at_step: only an elastic ring lets a killed worker back in";
  if (f.back_at_step > 0 && c.restarts == 0)
    return "back_at_step brings the worker back as a new process: set train.restarts (new processes in all)";
  if (c.family->survives_kill)
    return "";
  return c.topology + " does not re-form without a lost worker (parameter servers, local SGD, DiLoCo, gossip and a "
                      "flat ring go on without a killed worker)";
}

/// What virtual time does not simulate, refused naming the key.
void check_simulated(config_toml::reader& r, const run_config& c) {
  check(!c.single(), r.loc("experiment.clock") + " = \"virtual\" simulates workers that exchange: "
                                                             "topology.kind = \"single\" has one worker and no one "
                                                             "to exchange with");
  check(c.device == "cpu", r.loc("train.device") + " = \"" + c.device +
                             "\": virtual time computes every gradient on the CPU; model a GPU node's speed with "
                             "[[nodes]] step_ms instead");
  for (const auto& g : c.nodes)
    check(g.device.empty() || g.device == "cpu",
          g.where + ": device = \"" + g.device + "\": virtual time computes every gradient on the CPU; give the group's step_ms instead");
  check(c.checkpoint_every == 0 && c.checkpoint_every_s == 0,
        r.loc("train.checkpoint_every") + ": virtual time does not write checkpoints yet");
  for (const auto& f : c.faults)
    if (f.kind == fault_kind::kill) {
      const auto why = why_no_kill(c, f);
      check(why.empty(), f.where + ": kind = \"kill\" in virtual time: " + why);
    }
}

} // namespace

void read_virtual(config_toml::reader& r, run_config& c) {
  auto& v = c.virt;
  v.on = r.str("experiment.clock") == "virtual";
  v.step_ms = r.number("virtual.step_ms");
  v.distribution = r.str("virtual.distribution");
  v.cv = r.number("virtual.cv");
  v.straggler_p = r.number("virtual.straggler_p");
  v.straggler_k = r.number("virtual.straggler_k");
  v.replay = r.str("virtual.replay");
  const auto hosts = static_cast<int>(r.integer("virtual.hosts"));
  v.workers_per_host = static_cast<int>(r.integer("virtual.workers_per_host"));
  if (v.workers_per_host == 0) // one host, unless hosts says how many
    v.workers_per_host = hosts > 0 && c.workers % hosts == 0 ? c.workers / hosts : c.workers;
  v.intra_latency_us = r.number("virtual.intra_latency_us");
  v.intra_bandwidth_gbps = r.number("virtual.intra_bandwidth_gbps");
  v.nic = r.boolean("virtual.nic");
  v.cores_per_host = static_cast<int>(r.integer("virtual.cores_per_host"));
  v.threads = static_cast<int>(r.integer("virtual.threads"));
  v.latency_cv = r.number("virtual.latency_cv");
  v.apply_gbps = r.number("virtual.apply_gbps");
  v.copy_gbps = r.number("virtual.copy_gbps");
  v.restart_s = r.number("virtual.restart_s");
  if (hosts > 0)
    check(hosts * v.workers_per_host == c.workers,
          r.loc("virtual.hosts") + ": " + std::to_string(hosts) + " hosts x virtual.workers_per_host = " +
            std::to_string(v.workers_per_host) + " make " + std::to_string(hosts * v.workers_per_host) +
            " workers, but topology.workers = " + std::to_string(c.workers));
  v.hosts = hosts > 0 ? hosts : (c.workers + v.workers_per_host - 1) / v.workers_per_host;
  read_host_workers(r, c, hosts);
  read_host_bandwidth(r, c);
  if (v.on)
    check_simulated(r, c);
}

} // namespace gradwire::scheduler
