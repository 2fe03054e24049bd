#include "scheduler/app/config_renamed.hpp"

#include "kernels/error.hpp"
#include "kernels/log.hpp"
#include "scheduler/app/config_toml.hpp"

namespace gradwire::scheduler {

const std::vector<renamed_key>& renamed_keys() {
  static const std::vector<renamed_key> table = {
    {"topology.outer_lr", "topology.diloco.outer_lr"},
    {"topology.outer_momentum", "topology.diloco.outer_momentum"},
    {"topology.outer_delay", "topology.diloco.outer_delay"},
    {"topology.dynamic_local_steps", "topology.diloco.dynamic_local_steps"},
    {"topology.fragments", "topology.streaming.fragments"},
    {"topology.sync_delay", "topology.streaming.sync_delay"},
    {"topology.merge_alpha", "topology.streaming.merge_alpha"},
    // topology.gossip was the mode's string: it moves first, so that the
    // table of that name can take the other keys.
    {"topology.gossip", "topology.gossip.mode"},
    {"topology.graph", "topology.gossip.graph"},
    {"topology.degree", "topology.gossip.degree"},
    {"topology.graph_seed", "topology.gossip.graph_seed"},
    {"topology.gossip_compression", "topology.gossip.compression"},
    {"topology.consensus_lr", "topology.gossip.consensus_lr"},
    {"topology.bucket_kb", "topology.ring.bucket_kb"},
    {"topology.chunk_kb", "topology.ring.chunk_kb"},
    {"topology.sharded_update", "topology.ring.sharded_update"},
    {"topology.overlap", "topology.ring.overlap"},
    {"topology.allreduce", "topology.ring.allreduce"},
    {"topology.balance_every", "topology.ring.balance_every"},
    {"topology.mode", "topology.ps.mode"},
    {"topology.shards", "topology.ps.shards"},
    {"topology.staleness_bound", "topology.ps.staleness_bound"},
    {"topology.staleness_lr", "topology.ps.staleness_lr"},
    {"topology.dc_lambda", "topology.ps.dc_lambda"},
    {"topology.push_pull", "topology.ps.push_pull"},
    {"topology.backup_workers", "topology.ps.backup_workers"},
    {"topology.shard_placement", "topology.ps.shard_placement"},
    {"topology.rule", "topology.ps.rule"},
    // Compression is not the link's: a section of its own.
    {"transport.compress", "compression.kind"},
    {"transport.compress_ratio", "compression.ratio"},
    {"transport.compress_rank", "compression.rank"},
    {"transport.compress_ef", "compression.error_feedback"},
    {"transport.compress_warmup", "compression.warmup"},
    {"transport.compress_momentum", "compression.momentum"},
    {"transport.compress_update", "compression.update"},
  };
  return table;
}

namespace {

const char* renamed_to(const std::string& key) {
  for (const auto& r : renamed_keys())
    if (key == r.old_key)
      return r.new_key;
  return nullptr;
}

void warn_renamed(const std::string& where, const std::string& key, const std::string& now) {
  log::warn("{}: {} is now {} (its family's own table); the old name is read until the next release", where, key,
            now);
}

/// "topology.diloco.outer_lr" -> {"topology.diloco", "outer_lr"}.
std::pair<std::string, std::string> split_leaf(const std::string& key) {
  const auto dot = key.rfind('.');
  return {key.substr(0, dot), key.substr(dot + 1)};
}

} // namespace

std::string current_key(const std::string& key, const std::string& where) {
  const char* now = renamed_to(key);
  if (now == nullptr)
    return key;
  if (!where.empty())
    warn_renamed(where, key, now);
  return now;
}

void move_renamed_keys(toml::table& root, const std::string& source) {
  for (const auto& r : renamed_keys()) {
    const auto [old_table, old_leaf] = split_leaf(r.old_key);
    auto* from = config_toml::table_at(root, old_table, false);
    toml::node* value = from != nullptr ? from->get(old_leaf) : nullptr;
    if (value == nullptr || value->is_table())
      continue; // absent, or already the new table of that name (topology.gossip)
    const auto here = config_toml::where(source, *value);
    // Moved, not copied: a copy of a toml++ node drops its file and line,
    // which the checks of the value still cite. It is taken out first, as
    // the new key's table may have the old key's name.
    toml::table held;
    value->visit([&](auto&& v) { held.insert_or_assign("v", std::move(v)); });
    from->erase(old_leaf);
    const auto [new_table, new_leaf] = split_leaf(r.new_key);
    auto* to = config_toml::table_at(root, new_table, true);
    check(to != nullptr, here + ": " + new_table + " must be a table (it holds " + r.new_key + ")");
    if (const auto* both = to->get(new_leaf))
      throw error(here + ": " + r.old_key + " and " + r.new_key + " (" + config_toml::where(source, *both) +
                  ") are one key, given twice: keep " + r.new_key);
    warn_renamed(here, r.old_key, r.new_key);
    held.get("v")->visit([&, leaf = new_leaf](auto&& v) { to->insert_or_assign(leaf, std::move(v)); });
  }
}

} // namespace gradwire::scheduler
