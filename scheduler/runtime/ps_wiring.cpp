/// @file ps_wiring.cpp
/// The parameter-server wiring (and local SGD, which is the same wiring
/// with averaging shards): M shards over even ranges of the parameter
/// buffer, N workers that pull slices and push gradient slices. In one
/// process every actor is here; across processes one worker per process,
/// the shards on rank 0 with the coordinator or spread (shard i on rank i
/// mod processes), reached through proxies.

#include "actors/ps_plan.hpp"
#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/runtime/execution.hpp"
#include "scheduler/runtime/ps_wiring.hpp"
#include "scheduler/runtime/shard_results.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <cstring>

namespace gradwire::scheduler {

namespace {

/// Every shard of the job: this process's own actors and a handle to each.
struct shard_set {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  std::vector<caf::actor> own;              ///< spawned here (to stop them)
  std::vector<actors::shard_actor> handles; ///< every shard, by id (a proxy where it lives elsewhere)
};

actors::ps_plan plan_of(const topology_setup& setup) { return actors::ps_plan_of(setup.ps); }

/// A lock-step shard's versions per checkpoint (sync: one a step; local
/// SGD: one an averaging round); 0 for the others, asked as they are.
std::int64_t snapshot_versions(const topology_setup& setup) {
  const auto grid = checkpoint_grid(setup);
  const auto per = plan_of(setup).steps_per_version;
  return grid > 0 && per > 0 ? grid / per : 0;
}

/// The coordinator's plan: every shard asked for the version of a checkpoint's step.
checkpoint_plan shard_checkpoints(const topology_setup& setup, const std::vector<actors::shard_actor>& shards) {
  const auto per = snapshot_versions(setup);
  const auto every = checkpoint_grid(setup);
  const auto steps = plan_of(setup).steps_per_version;
  return checkpoints_of(setup, shards, [per, every, steps](std::int64_t step) -> std::int64_t {
    if (per <= 0 || every <= 0)
      return -1;
    return step / steps;
  });
}

/// Shard i's rank.
int home_of(const topology_setup& setup, int i) {
  if (setup.node && static_cast<std::size_t>(i) < setup.shard_homes.size())
    return setup.shard_homes[static_cast<std::size_t>(i)];
  return setup.node && setup.ps.spread_shards ? i % setup.node->size() : 0;
}

/// Shard i, from the whole parameter buffer `params`.
actors::shard_config shard_config_of(const topology_setup& setup, const shard_set& s, int i);

/// Whether shard i writes a record here (experiment.record): an async
/// server's shards, whose order of updates nothing else fixes.
bool records(const topology_setup& setup) {
  return !setup.record_dir.empty() && plan_of(setup).per_push;
}

/// A replay's record for shard i (the cut keeps it alive).
std::shared_ptr<const actors::shard_record> replay_of(const topology_setup& setup, int i) {
  if (!setup.replay)
    return nullptr;
  check(static_cast<std::size_t>(i) < setup.replay->shards.size(),
        "replay: no record for shard " + std::to_string(i) + " (" + std::to_string(setup.replay->shards.size()) +
          " shard records for topology.ps.shards = " + std::to_string(setup.ps.shards) + ")");
  return {setup.replay, &setup.replay->shards[static_cast<std::size_t>(i)]};
}

actors::shard_actor spawn_one(caf::actor_system& sys, actors::shard_config sc, const float* params) {
  if (sc.ps.python_rule() && !sc.python_rule)
    sc.python_rule = actors::open_python_rule(sc); // a bad rule ends the run here, in its own words
  auto slice0 = kernels::tensor::empty({static_cast<std::int64_t>(sc.end - sc.begin)});
  std::memcpy(slice0.data(), params + sc.begin, (sc.end - sc.begin) * sizeof(float));
  return actors::spawn_ps_shard(sys, sc, slice0);
}

/// Streaming's shards: each fragment (whole tensors) cut into
/// shards / fragments even pieces, fragment by fragment.
std::vector<std::pair<std::size_t, std::size_t>> streaming_ranges(const topology_setup& setup, std::size_t n) {
  const int f = setup.ps.fragments;
  check(f >= 1 && setup.ps.shards % f == 0,
        "topology.streaming.fragments = " + std::to_string(f) + " needs a multiple of it in shards, not " +
          std::to_string(setup.ps.shards));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& [b, e] : fragment_ranges(models::layout_of(setup.spec), n, f))
    for (const auto& [pb, pe] : shard_ranges(e - b, setup.ps.shards / f))
      out.emplace_back(b + pb, b + pe);
  return out;
}

shard_set spawn_shards(caf::actor_system& sys, const topology_setup& setup, const models::model& initial) {
  shard_set s;
  s.ranges = plan_of(setup).streaming ? streaming_ranges(setup, initial.size()) : shard_ranges(initial.size(), setup.ps.shards);
  for (const auto& [b, e] : s.ranges)
    check(e > b, "topology.ps.shards = " + std::to_string(setup.ps.shards) + " leaves a shard empty (the model has " +
                   std::to_string(initial.size()) + " parameters)");
  auto* nd = setup.node.get();
  const int rank = nd ? nd->rank() : 0;
  s.handles.resize(static_cast<std::size_t>(setup.ps.shards));
  for (int i = 0; i < setup.ps.shards; ++i) {
    if (home_of(setup, i) != rank) {
      s.handles[static_cast<std::size_t>(i)] = actors::as_shard(nd->remote(home_of(setup, i), transport::slots::shard(i)));
      continue;
    }
    if (records(setup))
      std::filesystem::create_directories(setup.record_dir);
    s.handles[static_cast<std::size_t>(i)] = spawn_one(sys, shard_config_of(setup, s, i), initial.params().data());
    s.own.push_back(caf::actor_cast<caf::actor>(s.handles[static_cast<std::size_t>(i)]));
    if (nd)
      nd->publish(transport::slots::shard(i), s.own.back());
  }
  return s;
}

actors::shard_config shard_config_of(const topology_setup& setup, const shard_set& s, int i) {
  actors::shard_config sc;
  sc.id = i;
  sc.begin = s.ranges[static_cast<std::size_t>(i)].first;
  sc.end = s.ranges[static_cast<std::size_t>(i)].second;
  sc.workers = setup.workers;
  sc.ps = setup.ps;
  sc.last_version = setup.steps;
  sc.opt = setup.opt;
  sc.compress = setup.compress;
  sc.worker_lr_scale = setup.worker_lr_scale;
  if (plan_of(setup).per_push) // one update per worker's push: its schedule runs in rounds of them
    sc.opt.schedule.updates_per_step = setup.workers;
  sc.trace = setup.trace;
  sc.vclock = setup.sim;
  sc.snapshot_every_versions = snapshot_versions(setup);
  if (setup.resume)
    sc.resume = setup.resume->part("shard " + std::to_string(i));
  if (records(setup)) {
    sc.record_path = setup.record_dir + "/shard-" + std::to_string(i) + ".gwr";
    sc.record_max_bytes = setup.record_max_bytes;
    sc.record_run = setup.run_id;
  }
  sc.replay = replay_of(setup, i);
  return sc;
}

/// An async server with spread shards goes on without a shard's rank: its
/// shards are rebuilt on rank 0 (elastic_plan::rebuild_shards).
bool shards_may_move(const topology_setup& setup) {
  return setup.node && setup.ps.spread_shards && plan_of(setup).per_push;
}

void rebuild_hooks(caf::actor_system& sys, const topology_setup& setup, shard_set& shards, elastic_plan& e) {
  e.holds_shards = [&setup](int rank) { // rank 0 is never lost to a running job
    for (int i = 0; i < setup.ps.shards; ++i)
      if (rank != 0 && home_of(setup, i) == rank)
        return true;
    return false;
  };
  e.rebuild_shards = [&sys, &setup, &shards](int rank, const std::vector<float>& params, std::int64_t version,
                                              const std::vector<std::int64_t>& clocks, const std::vector<bool>& live) {
    std::vector<std::pair<int, actors::shard_actor>> moved;
    for (int i = 0; i < setup.ps.shards; ++i) {
      if (home_of(setup, i) != rank || params.size() < shards.ranges[static_cast<std::size_t>(i)].second)
        continue;
      auto sc = shard_config_of(setup, shards, i);
      sc.resume.reset();
      sc.record_path.clear(); // the record ends with the lost rank: a replay follows runs without faults
      sc.first_version = version;
      sc.first_clocks = clocks;
      sc.first_live = live;
      shards.handles[static_cast<std::size_t>(i)] = spawn_one(sys, sc, params.data());
      shards.own.push_back(caf::actor_cast<caf::actor>(shards.handles[static_cast<std::size_t>(i)]));
      moved.emplace_back(i, shards.handles[static_cast<std::size_t>(i)]);
    }
    return moved;
  };
}

actors::worker_config ps_worker(const topology_setup& setup, const models::dataset& data, const shard_set& s, int r,
                                const caf::actor& report_to) {
  auto wc = base_worker(setup, data, r, report_to);
  wc.ps = setup.ps; // the options; the handles and ranges below
  wc.ps.handles = s.handles;
  wc.ps.may_move = shards_may_move(setup) && setup.min_workers > 0;
  // Then the coordinator knows each worker's pushes (a rebuilt shard's clocks, for SSP) to the step.
  wc.step_progress = wc.step_progress || wc.ps.may_move;
  wc.ps.ranges = s.ranges;
  if (setup.replay && static_cast<std::size_t>(r) < setup.replay->steps.size())
    wc.steps = setup.replay->steps[static_cast<std::size_t>(r)];
  return wc;
}

/// A worker of the wiring: streaming DiLoCo's, or the parameter server's.
caf::actor spawn_ps_worker(caf::actor_system& sys, actors::worker_config wc) {
  return actors::ps_plan_of(wc.ps).streaming ? actors::spawn_streaming_worker(sys, std::move(wc)) : actors::spawn_worker(sys, std::move(wc));
}

/// The trained parameters, staleness and dropped pushes, from every shard
/// (on any rank) into `out`; what went wrong, naming the shard, or "".
std::string collect_shards(caf::actor_system& sys, caf::scoped_actor& self, const topology_setup& setup,
                           const shard_set& s, std::size_t size, topology_outcome& out) {
  auto failure = fetch_params(sys, self, setup, s.handles, s.ranges, size, out.params);
  auto stats = add_shard_stats(sys, self, setup, s.handles, out);
  return failure.empty() ? stats : failure;
}

/// Spread shards outlive their process's worker: every rank keeps its
/// shards until rank 0 has fetched them (the others may still push).
constexpr int shards_fetched = 2;

bool waits_for_fetch(const topology_setup& setup) {
  return setup.node && setup.ps.spread_shards && setup.sync_ranks;
}

/// Across processes every mode goes on without a lost worker: its shards
/// complete versions (sync, local SGD) and clocks (SSP) with the
/// survivors; an async server also rebuilds a lost rank's shards.
elastic_plan ps_elastic(caf::actor_system& sys, const topology_setup& setup, shard_set& shards) {
  elastic_plan elastic;
  elastic.tell_survivors = true;
  elastic.shards = shards.handles;
  elastic.min_workers = std::max(setup.min_workers, setup.ps.backup + 1); // a version needs a push
  elastic.why_not = setup.min_workers == 0 ? "train.min_workers = 0"
                    : setup.ps.spread_shards && !shards_may_move(setup)
                      ? "with topology.ps.shard_placement = \"spread\" a lost rank takes its shards with it, and only "
                        "an asynchronous server rebuilds them (place them on rank 0 for a job that goes on)"
                      : "";
  if (shards_may_move(setup))
    rebuild_hooks(sys, setup, shards, elastic);
  elastic.on = elastic.why_not.empty() && setup.workers > 1;
  return elastic;
}

/// Virtual time: the shards on host 0, or shard i on host i mod hosts
/// ("spread").
void place_shards(const topology_setup& setup, shard_set& shards) {
  for (std::size_t i = 0; i < shards.handles.size(); ++i) {
    const int host = setup.ps.spread_shards ? static_cast<int>(i) % setup.sim->setup().hosts : 0;
    shards.handles[i] = actors::as_shard(setup.sim->place(caf::actor_cast<caf::actor>(shards.handles[i]), host));
  }
}

topology_outcome run_ps_wiring(caf::actor_system& sys, const topology_setup& setup, const models::dataset& data,
                               const progress_fn& on_progress, const metrics_fn& on_metrics,
                               const std::atomic<bool>* stop) {
  check((*setup.family).takes_local_steps == (setup.ps.local_steps > 0),
        setup.ps.local_steps > 0 ? "ps_options::local_steps > 0 is local SGD: topology.kind must be local-sgd or diloco"
                             : "local SGD and DiLoCo need topology.local_steps of 1 or more");
  check(setup.ps.outer == (setup.family == &diloco_family),
        "ps_options::outer (DiLoCo's outer step) goes with topology.kind = \"diloco\" and only with it");
  check(setup.ps.backup >= 0 && setup.ps.backup < setup.workers,
        "topology.ps.backup_workers = " + std::to_string(setup.ps.backup) + " must be below topology.workers = " +
          std::to_string(setup.workers));
  execution ex(sys, setup);
  models::model initial(setup.spec, kernels::device::cpu(), setup.seed);
  auto shards = spawn_shards(sys, setup, initial);
  stop_on_throw guard(sys);
  if (!setup.sim)
    guard.add(shards.own);
  else
    place_shards(setup, shards);
  for (int r : ex.ranks())
    ex.add_worker(r, spawn_ps_worker(sys, ps_worker(setup, data, shards, r, ex.report_to())));
  ex.tell_on_kill(shards.handles); // a worker killed in virtual time: the shards and survivors go on without it
  ex.wire([](caf::scoped_actor&, int, const std::vector<caf::actor>&) {}); // workers start on their own
  // Across processes an async parameter server waits for no worker: it
  // carries on without one whose process failed.
  const bool carry_on = plan_of(setup).waits_for_none && !setup.ps.spread_shards;
  auto& self = ex.self();
  auto got = ex.coordinate(on_progress, on_metrics, stop, shard_checkpoints(setup, shards.handles),
                           setup.node ? ps_elastic(sys, setup, shards) : elastic_plan{}, carry_on);
  if (!got) { // not rank 0: its worker is done
    if (waits_for_fetch(setup))
      setup.sync_ranks(shards_fetched);
    stop_actors(self, shards.own);
    return {};
  }
  auto c = std::move(*got);
  if (!c.failure.empty()) {
    end_here(self, setup, shards.own);
    throw error("parameter server: " + c.failure); // the other ranks stop with rank 0
  }
  topology_outcome out;
  const auto failure = collect_shards(sys, self, setup, shards, initial.size(), out);
  if (waits_for_fetch(setup))
    setup.sync_ranks(shards_fetched); // the other ranks may let their shards go
  end_here(self, setup, shards.own);
  ex.finish();
  check(failure.empty(), "parameter server: " + failure);
  take_coordination(out, std::move(c));
  return out;
}

std::string ps_mode(const topology_setup& s) { return plan_of(s).pacing; }

std::string ps_describe(const topology_setup& s) {
  const auto plan = plan_of(s);
  std::string d = "parameter server, " + std::string(plan.pacing);
  if (plan.backups > 0)
    d += fmt::format(", {} backup worker(s)", plan.backups);
  if (plan.dc_lambda > 0)
    d += fmt::format(", DC-ASGD lambda {}", plan.dc_lambda);
  return d + (s.by_host ? std::string(", a shard per host") : fmt::format(", {} shard(s)", s.ps.shards));
}

bool ps_lock_step(const topology_setup& s) { return plan_of(s).lock_step; }
bool ps_shares_budget(const topology_setup& s) { return plan_of(s).per_push; }
bool ps_per_worker_lr(const topology_setup& s) { return plan_of(s).per_push; }
std::int64_t ps_time_grid(const topology_setup& s) {
  return plan_of(s).lock_step ? checkpoint_versions_apart : every_step(s);
}

std::string local_sgd_mode(const topology_setup& s) { return plan_of(s).streaming ? "local-sgd-streaming" : "local-sgd"; }
std::string local_sgd_describe(const topology_setup& s) {
  if (plan_of(s).streaming)
    return fmt::format("streaming local SGD, {} fragments each averaged every {} steps, staggered, pulled {} steps "
                       "after the push (merge alpha {})",
                       s.ps.fragments, s.ps.local_steps, s.ps.sync_delay, s.ps.merge_alpha);
  return fmt::format("local SGD, average every {} steps", s.ps.local_steps);
}
std::string diloco_mode(const topology_setup& s) {
  const auto plan = plan_of(s);
  return plan.per_push ? "diloco-async" : plan.streaming ? "diloco-streaming" : "diloco";
}
std::string diloco_describe(const topology_setup& s) {
  const auto plan = plan_of(s);
  if (plan.streaming)
    return fmt::format("streaming DiLoCo, {} fragments each every {} steps, staggered, pulled {} steps after the push "
                       "(merge alpha {}), through an outer Nesterov step (lr {}, momentum {})",
                       s.ps.fragments, s.ps.local_steps, s.ps.sync_delay, s.ps.merge_alpha, s.ps.outer_lr,
                       s.ps.outer_momentum);
  if (plan.per_push)
    return fmt::format("async DiLoCo, each worker's pseudo-gradient every {} steps through an outer Nesterov step "
                       "(lr {}, momentum {}) as it comes",
                       s.ps.local_steps, s.ps.outer_lr, s.ps.outer_momentum);
  return fmt::format("DiLoCo, every {} steps an outer Nesterov step (lr {}, momentum {})", s.ps.local_steps,
                     s.ps.outer_lr, s.ps.outer_momentum);
}
/// Async DiLoCo's inner steps are each one worker's batch, taken at its own
/// pace, so a sample budget may be shared out by speed; sync rounds are
/// lock-step.
bool diloco_shares_budget(const topology_setup& s) { return plan_of(s).per_push; }
/// The first multiple of local_steps from checkpoint_versions_apart up: a
/// checkpoint falls at the end of an averaging round.
std::int64_t local_sgd_time_grid(const topology_setup& s) {
  const std::int64_t h = s.ps.local_steps;
  return h * ((checkpoint_versions_apart + h - 1) / h);
}

} // namespace

const topology_family parameter_server_family{
  "parameter-server",
  /*order=*/0,
  "workers pull parameter slices from shards and push gradient slices (topology.ps.mode sync, async or ssp)",
  /*has_shards=*/true,
  /*peers_talk=*/false,
  /*has_groups=*/false,
  /*takes_local_steps=*/false,
  /*splits_batch=*/false,
  /*sums_buckets=*/false,
  /*survives_kill=*/true,
  run_ps_wiring,
  ps_lock_step,
  ps_shares_budget,
  ps_per_worker_lr,
  ps_time_grid,
  ps_mode,
  ps_describe,
};
GRADWIRE_REGISTER_FAMILY(parameter_server_family);

const topology_family local_sgd_family{
  "local-sgd",
  /*order=*/1,
  "workers step on their own and their parameters are averaged by shards every topology.local_steps",
  /*has_shards=*/true,
  /*peers_talk=*/false,
  /*has_groups=*/false,
  /*takes_local_steps=*/true,
  /*splits_batch=*/false,
  /*sums_buckets=*/false,
  /*survives_kill=*/true,
  run_ps_wiring,
  never,
  never,
  always,
  local_sgd_time_grid,
  local_sgd_mode,
  local_sgd_describe,
};
GRADWIRE_REGISTER_FAMILY(local_sgd_family);

const topology_family diloco_family{
  "diloco",
  /*order=*/2,
  "local SGD whose shards apply the workers' average every topology.local_steps as an outer SGD step with Nesterov momentum ([topology.diloco] outer_lr, outer_momentum)",
  /*has_shards=*/true,
  /*peers_talk=*/false,
  /*has_groups=*/false,
  /*takes_local_steps=*/true,
  /*splits_batch=*/false,
  /*sums_buckets=*/false,
  /*survives_kill=*/true,
  run_ps_wiring,
  never,
  diloco_shares_budget,
  always,
  local_sgd_time_grid,
  diloco_mode,
  diloco_describe,
};
GRADWIRE_REGISTER_FAMILY(diloco_family);

} // namespace gradwire::scheduler
