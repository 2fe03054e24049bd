#include "scheduler/app/replay.hpp"

#include "actors/ps_plan.hpp"
#include "kernels/error.hpp"
#include "scheduler/app/config_renamed.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

namespace gradwire::scheduler {
namespace {

namespace fs = std::filesystem;

/// The record files in `dir`, by id ("<prefix><id>.gwr": shard-<id> for a
/// shard's, mixer-<rank> for an AD-PSGD worker's store).
std::map<int, fs::path> record_files(const fs::path& dir, const std::string& prefix = "shard-") {
  std::map<int, fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".gwr")
      continue;
    const auto id = name.substr(prefix.size(), name.size() - prefix.size() - 4);
    if (!id.empty() && id.size() < 9 && std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }))
      out[std::stoi(id)] = e.path();
  }
  return out;
}

/// Whether `c`'s run is deterministic without a record (a lock-step run);
/// false for an async parameter server, which needs one. Throws, naming
/// `where`, for the runs that are not recorded at all.
bool deterministic_without_record(const run_config& c, const std::string& where) {
  if (c.family == &gossip_family)
    return c.gossip.mode != actors::gossip_mode::adpsgd;
  const auto plan = actors::ps_plan_of(c.ps);
  check(!(c.family->has_shards && plan.backups > 0),
        where + ": backup workers' dropped pushes are not recorded: replay follows async parameter servers and "
                "lock-step topologies");
  if (c.family->has_shards && plan.per_push)
    return false;
  check(c.mode == "sync", where + ": " + c.topology + " in mode " + c.mode +
                            " is not recorded: replay follows async parameter servers and lock-step topologies");
  return true;
}

/// A run that lost workers shared their data out among the survivors from
/// then on, which a replay does not repeat: refused. (A killed run has no
/// summary.json; its record ends where it stopped.)
void check_no_losses(const fs::path& dir) {
  std::ifstream f(dir / "summary.json");
  if (!f)
    return;
  const auto s = nlohmann::json::parse(f, nullptr, false);
  if (s.is_discarded() || !s.is_object())
    return;
  const auto lost = s.value("lost_workers", nlohmann::json::array());
  check(!lost.is_array() || lost.empty(),
        dir.string() + ": the run lost worker(s) " + lost.dump() +
          " and shared their data out among the others, which a replay does not repeat");
}

/// The run's config as a replay runs it: in this process, real time, at
/// full speed (a node's slowdown, delay and jitter only ever cost time).
/// Its [[faults]] acted on processes, links and time; what they did to the
/// order of the updates is in the record.
void at_full_speed(run_config& c) {
  c.faults.clear();
  for (auto& n : c.nodes) {
    n.slowdown = 1.0;
    n.delay_ms = 0;
    n.jitter_ms = 0;
  }
  c.virt.on = false;
}

/// The keys that decide who exchanges what with whom, and so the schedule
/// itself: a replay keeps the record's.
constexpr const char* schedule_keys[] = {"topology.kind",    "topology.ps.mode",     "topology.workers",
                                         "topology.ps.shards",  "topology.ps.push_pull", "topology.ps.shard_placement",
                                         "topology.ps.staleness_bound", "topology.local_steps", "topology.diloco.dynamic_local_steps",
                                         "topology.gossip.mode", "topology.gossip.graph", "topology.gossip.degree",
                                         "experiment.clock"};

} // namespace

void check_replay_overrides(const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) {
    const auto given = o.substr(0, o.find('='));
    const auto key = current_key(given, {}); // (apply_override warns of an old name)
    for (const char* k : schedule_keys)
      check(key != k, "--set " + o + ": " + key +
                        " decides how workers and shards exchange, and so the schedule a replay follows; a replay keeps "
                        "the run's (it may change the algorithm: the learning rate, topology.ps.staleness_lr, "
                        "topology.ps.dc_lambda, clipping, the optimizer)");
  }
}

namespace {

/// A record names the run that wrote it: a record of another run (copied
/// from another folder) is refused, naming both.
void check_run_of(const std::string& record_run, const std::string& path, const run_config& c) {
  if (record_run.empty() || c.run_id.empty()) // written before records named their run
    return;
  check(record_run == c.run_id, path + ": the record of run " + record_run + ", but this folder's run is " + c.run_id +
                                  " (config.toml experiment.run_id): a record replays only the run that wrote it");
}

std::shared_ptr<const actors::replay_cut> cut_of(const fs::path& dir, const run_config& c) {
  const auto files = record_files(dir);
  std::vector<actors::shard_record> records;
  for (const auto& [id, path] : files) {
    check(id == static_cast<int>(records.size()),
          dir.string() + ": no record of shard " + std::to_string(records.size()) + " (there is one of shard " +
            std::to_string(id) + ")");
    records.push_back(actors::read_record(path.string()));
    check_run_of(records.back().header.run, path.string(), c);
  }
  check(static_cast<int>(records.size()) == c.ps.shards || c.shards_per_host,
        dir.string() + ": records of " + std::to_string(records.size()) + " shards for topology.ps.shards = " +
          std::to_string(c.ps.shards));
  return std::make_shared<const actors::replay_cut>(actors::consistent_cut(std::move(records), c.workers));
}

/// An AD-PSGD run's records: every worker's store, whole.
std::shared_ptr<const actors::replay_cut> mixers_of(const fs::path& dir, const run_config& c) {
  const auto files = record_files(dir, "mixer-");
  auto cut = std::make_shared<actors::replay_cut>();
  for (int r = 0; r < c.workers; ++r) {
    const auto it = files.find(r);
    check(it != files.end(), dir.string() + ": no record of worker " + std::to_string(r) + "'s store (mixer-" +
                               std::to_string(r) + ".gwr) for topology.workers = " + std::to_string(c.workers));
    auto rec = std::make_shared<actors::mix_record>(actors::read_mix_record(it->second.string()));
    check_run_of(rec->header.run, it->second.string(), c);
    check(rec->header.worker == r && rec->header.workers == c.workers,
          it->second.string() + ": the record of worker " + std::to_string(rec->header.worker) + " of " +
            std::to_string(rec->header.workers) + ", for worker " + std::to_string(r) + " of " + std::to_string(c.workers));
    actors::check_replayable(*rec);
    cut->steps.push_back(rec->steps());
    cut->mixers.push_back(std::move(rec));
  }
  std::vector<const actors::mix_record*> all;
  for (const auto& m : cut->mixers)
    all.push_back(m.get());
  actors::check_pairings(all);
  return cut;
}

nlohmann::json facts_of(const replay_request& r, const actors::replay_cut* cut) {
  nlohmann::json f = {{"of", r.run_dir}, {"overrides", r.overrides}};
  if (!cut) {
    f["record"] = nullptr; // a lock-step run: its config again
    return f;
  }
  std::int64_t entries = 0;
  bool was_cut = false;
  for (const auto& s : cut->shards) {
    entries += static_cast<std::int64_t>(s.entries.size());
    was_cut = was_cut || s.cut;
  }
  for (const auto& m : cut->mixers)
    entries += static_cast<std::int64_t>(m->events.size());
  f["record"] = {{"entries", entries},      {"entries_left_out", cut->entries_left_out},
                 {"updates_left_out", cut->updates_left_out}, {"file_cut", was_cut},
                 {"steps_per_worker", cut->steps}, {"mixers", cut->mixers.size()}};
  return f;
}

} // namespace

replay_source open_replay(const replay_request& r) {
  const fs::path dir(r.run_dir);
  std::error_code ec;
  check(fs::is_directory(dir, ec), r.run_dir + ": no such results folder");
  check(fs::exists(dir / "config.toml", ec), r.run_dir + ": not a run's results folder (no config.toml)");
  check_replay_overrides(r.overrides);
  replay_source s;
  s.cfg = load_config((dir / "config.toml").string(), r.overrides);
  auto& c = s.cfg;
  check(!c.single(), r.run_dir + ": a single worker's run is deterministic: run its config.toml again");
  check_no_losses(dir);
  const auto rec_dir = dir / "record";
  if (!record_files(rec_dir, "mixer-").empty())
    s.cut = mixers_of(rec_dir, c);
  else if (record_files(rec_dir).empty())
    check(deterministic_without_record(c, r.run_dir),
          rec_dir.string() + ": no record (the run had experiment.record = false, or stopped before its first update)");
  else
    s.cut = cut_of(rec_dir, c);
  at_full_speed(c);
  std::string base = r.run_dir;
  while (base.size() > 1 && base.back() == '/')
    base.pop_back();
  c.out = r.out.empty() ? base + "-replay" : r.out;
  s.facts = facts_of(r, s.cut.get());
  return s;
}

nlohmann::json record_facts(const std::string& dir) {
  const auto files = record_files(dir);
  const auto mixers = record_files(dir, "mixer-");
  if (files.empty() && mixers.empty())
    return nullptr;
  std::int64_t applied = 0, pulls = 0, bytes = 0;
  bool cut = false;
  for (const auto& [id, path] : files) {
    const auto r = actors::read_record(path.string());
    for (const auto& e : r.entries)
      (e.serve ? pulls : applied) += 1;
    bytes += r.bytes;
    cut = cut || r.cut;
  }
  for (const auto& [id, path] : mixers) { // AD-PSGD: an update is a worker's apply
    const auto r = actors::read_mix_record(path.string());
    applied += r.steps();
    bytes += r.bytes;
    cut = cut || r.cut || !r.closed();
  }
  return {{"files", files.size() + mixers.size()},
          {"updates", applied},
          {"pulls", pulls},
          {"bytes", bytes},
          {"bytes_per_update", applied > 0 ? static_cast<double>(bytes) / static_cast<double>(applied) : 0.0},
          {"cut", cut}};
}

namespace {

/// The data after a safetensors file's header ("" when it is not one).
std::string tensor_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 8)
    return {};
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<std::uint64_t>(static_cast<unsigned char>(all[static_cast<std::size_t>(i)])) << (8 * i);
  return n <= all.size() - 8 ? all.substr(8 + n) : std::string{};
}

} // namespace

bool same_tensors(const std::string& a, const std::string& b) {
  const auto x = tensor_bytes(a);
  return !x.empty() && x == tensor_bytes(b);
}

} // namespace gradwire::scheduler
