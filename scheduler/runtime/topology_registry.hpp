#pragma once
/// @file topology_registry.hpp
/// The topology registry: one row per family of wirings. Whatever depends
/// on the family (its config name, how it is wired, whether its steps are
/// lock-step, whether workers share a sample budget, where checkpoints may
/// fall, what the summary calls its mode, how a run describes it) is read
/// from its row; nothing else switches on the kind. Each family's row is
/// defined beside its wiring (ps_wiring.cpp, ring_wiring.cpp,
/// gossip_wiring.cpp) and registers itself there
/// (GRADWIRE_REGISTER_FAMILY), so a new family edits no list. Its wiring
/// header declares the row for code that names it (`&ring_family`).
/// docs/extending.md walks through adding a family.

#include "scheduler/runtime/wiring.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace gradwire::scheduler {

using wiring_fn = topology_outcome (*)(caf::actor_system&, const topology_setup&, const models::dataset&,
                                       const progress_fn&, const metrics_fn&, const std::atomic<bool>*);
using setup_predicate = bool (*)(const topology_setup&);
using setup_text = std::string (*)(const topology_setup&);

struct topology_family {
  const char* name; ///< topology.kind in a config
  /// Its place in listings (`gradwire keys`, the known kinds of an error):
  /// rows register in no fixed order, so they are sorted by this.
  int order;
  const char* doc;  ///< what it is, for `gradwire keys`
  /// It spawns parameter shards: a checkpoint holds a part per shard, and
  /// topology.ps.shards and topology.ps.shard_placement apply.
  bool has_shards;
  /// Workers exchange with one another (not only with shards): across
  /// processes a lost rank is a lost peer of the survivors.
  bool peers_talk;
  /// Workers are grouped (topology.group_size, 0: by host).
  bool has_groups;
  /// topology.local_steps (H) applies.
  bool takes_local_steps;
  /// Every step splits one global batch between workers, so
  /// topology.ring.balance_every may move the split by speed.
  bool splits_batch;
  /// Workers sum gradient buckets by allreduce each step, across
  /// processes through the job's collective communicator or a ring of
  /// actors: topology.ring.allreduce applies.
  bool sums_buckets;
  /// A killed worker's survivors go on without it (its shards and the
  /// other workers, or its neighbours, are told; a flat ring re-forms):
  /// virtual time simulates a kill only where they do.
  bool survives_kill;
  wiring_fn run;
  /// Every worker's step s ends together: a step lasts at least its
  /// slowest worker's compute (the summary's step breakdown applies).
  setup_predicate lock_step;
  /// Each update is one worker's batch, so a sample budget may be shared
  /// out by speed (train.budget = "shared").
  setup_predicate shares_budget;
  /// Each worker's updates are its own, so [[nodes]] lr_scale applies.
  setup_predicate per_worker_lr;
  /// Time-based checkpoints (train.checkpoint_every_s) fall on multiples
  /// of this step count: where shards keep a copy of the version ahead, a
  /// coarser grid than 1 keeps those copies rare.
  std::int64_t (*time_grid)(const topology_setup&);
  setup_text mode;     ///< summary.json's "mode"
  setup_text describe; ///< one line for the run's banner and summary
};

/// Every registered family, in their `order`.
const std::vector<const topology_family*>& topology_families();
/// The row named `name` (topology.kind), or null.
const topology_family* find_family(std::string_view name);
/// The row named `name`; throws gradwire::error naming every known family.
const topology_family& family_named(std::string_view name);
/// The known names, "a, b, c".
std::string family_names();

/// Shared by rows: always / never; a time grid of every step.
bool always(const topology_setup&);
bool never(const topology_setup&);
std::int64_t every_step(const topology_setup&);

/// Adds a row to the registry while the program starts (one static object
/// per row; the registry's list is a function-local static, so the order in
/// which files initialise does not matter).
struct family_registration {
  explicit family_registration(const topology_family& row);
};

/// Registers `row` (a topology_family defined at namespace scope in the
/// same file). The wiring files are linked whole (scheduler/CMakeLists.txt),
/// so a row that nothing else names still registers.
#define GRADWIRE_REGISTER_FAMILY(row) \
  static const ::gradwire::scheduler::family_registration row##_registration { row }

} // namespace gradwire::scheduler
