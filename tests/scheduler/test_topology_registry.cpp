// The topology registry: one row per family, found by name and by kind,
// the config's topology.kind taken from it, and the rows' rules (lock-step,
// shared budget, checkpoint grid, mode, description) as the wirings need.
#include "kernels/error.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/config_schema.hpp"
#include "scheduler/runtime/topology_registry.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ps_wiring.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <catch2/catch.hpp>

#include <set>

using namespace gradwire;
using namespace gradwire::scheduler;

TEST_CASE("topology registry: every row registers itself once, in its order, and is found by its name") {
  std::set<std::string> names;
  std::set<const topology_family*> rows;
  int order = -1;
  for (const auto* f : topology_families()) {
    INFO(f->name);
    CHECK(names.insert(f->name).second);
    CHECK(rows.insert(f).second);
    CHECK(f->order > order);
    order = f->order;
    CHECK(find_family(f->name) == f);
    CHECK(&family_named(f->name) == f);
    CHECK(f->run != nullptr);
    CHECK(f->lock_step != nullptr);
    CHECK(f->shares_budget != nullptr);
    CHECK(f->per_worker_lr != nullptr);
    CHECK(f->time_grid != nullptr);
    CHECK(f->mode != nullptr);
    CHECK(f->describe != nullptr);
  }
  // Every family this build links is a row (a new one is found by the same
  // loop, with no edit here), the default first, and family_names() lists
  // the rows in their order.
  CHECK(names.size() == topology_families().size());
  CHECK(topology_families().front() == &parameter_server_family);
  std::string listed;
  for (const auto* f : topology_families())
    listed += std::string(listed.empty() ? "" : ", ") + f->name;
  CHECK(family_names() == listed);
  for (const auto* f : {&parameter_server_family, &local_sgd_family, &diloco_family, &ring_family,
                        &hierarchical_family, &gossip_family}) // the families the rules below name
    CHECK(rows.count(f) == 1);
}

TEST_CASE("topology registry: an unknown kind is refused, naming every known one") {
  CHECK(find_family("rign") == nullptr);
  CHECK(find_family("single") == nullptr); // one worker without actors: no wiring
  try {
    family_named("rign");
    FAIL("an unknown kind was accepted");
  } catch (const error& e) {
    const std::string what = e.what();
    CHECK(what.find("unknown topology kind 'rign'") != std::string::npos);
    for (const auto* f : topology_families())
      CHECK(what.find(f->name) != std::string::npos);
  }
}

TEST_CASE("topology registry: the config's topology.kind accepts exactly single and the registry's names") {
  const auto* spec = find_key("topology.kind");
  REQUIRE(spec != nullptr);
  std::vector<std::string> expected = {"single"};
  for (const auto* f : topology_families())
    expected.emplace_back(f->name);
  CHECK(spec->allowed == expected);
  for (const auto* f : topology_families())
    CHECK(spec->doc.find(std::string(f->name) + ": " + f->doc) != std::string::npos);

  const auto single = parse_config("", "single.toml");
  CHECK(single.single());
  for (const auto* f : topology_families()) {
    INFO(f->name);
    const auto c = parse_config("[topology]\nkind = \"" + std::string(f->name) + "\"\nlocal_steps = 3\n", "k.toml");
    CHECK(c.family == f);
    CHECK(c.ps.local_steps == (f->takes_local_steps ? 3 : 0));
  }
  CHECK_THROWS_WITH(parse_config("[topology]\nkind = \"gossip\"\nbalance_every = 2\n", "b.toml"),
                    Catch::Contains("b.toml:3") && Catch::Contains("not gossip"));
}

TEST_CASE("topology registry: the rows' rules for each family") {
  topology_setup s;
  s.family = &parameter_server_family;
  s.ps.sync = true;
  const auto& ps = *s.family;
  CHECK(ps.lock_step(s));
  CHECK_FALSE(ps.shares_budget(s));
  CHECK(ps.time_grid(s) == checkpoint_versions_apart);
  CHECK(ps.mode(s) == "sync");
  s.ps.backup = 1; // backup workers: a version no longer waits for all
  CHECK_FALSE(ps.lock_step(s));
  CHECK(ps.time_grid(s) == 1);
  CHECK(ps.describe(s) == "parameter server, sync, 1 backup worker(s), 1 shard(s)");
  s.ps = {};
  s.ps.sync = false;
  s.ps.staleness_bound = 2;
  s.ps.shards = 3;
  CHECK(ps.shares_budget(s));
  CHECK(ps.per_worker_lr(s));
  CHECK(ps.mode(s) == "ssp");
  CHECK(ps.describe(s) == "parameter server, ssp, 3 shard(s)");
  s.by_host = true;
  CHECK(ps.describe(s) == "parameter server, ssp, a shard per host");

  s = {};
  s.family = &local_sgd_family;
  s.ps.local_steps = 3;
  const auto& local = *s.family;
  CHECK(local.time_grid(s) == 12); // the first multiple of H from checkpoint_versions_apart up
  CHECK_FALSE(local.lock_step(s));
  CHECK(local.describe(s) == "local SGD, average every 3 steps");
  s.family = &diloco_family;
  s.ps.outer = true;
  const auto& diloco = *s.family;
  CHECK_FALSE(diloco.shares_budget(s)); // sync rounds: lock step
  s.ps.sync = false;                    // async DiLoCo: each worker at its own pace
  CHECK(diloco.shares_budget(s));
  CHECK(diloco.mode(s) == "diloco-async");

  s = {};
  s.family = &gossip_family;
  s.gossip.mode = actors::gossip_mode::adpsgd;
  const auto& gossip = *s.family;
  CHECK(gossip.shares_budget(s));
  CHECK(gossip.mode(s) == "adpsgd");
  s.gossip.mode = actors::gossip_mode::dpsgd;
  CHECK_FALSE(gossip.shares_budget(s));
  CHECK(gossip.describe(s) == "gossip D-PSGD on a ring graph");

  s = {};
  s.family = &hierarchical_family;
  s.ring.group_size = 4;
  const auto& hier = *s.family;
  CHECK(hier.lock_step(s));
  CHECK_FALSE(hier.per_worker_lr(s));
  CHECK(hier.describe(s) == "hierarchical allreduce, groups of 4");
  s.by_host = true;
  s.ring.balance_every = 5;
  CHECK(hier.describe(s) == "hierarchical allreduce, groups by host, batches balanced every 5 steps");
}
