#include "scheduler/app/config.hpp"

#include "kernels/device.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/app/config_diloco.hpp"
#include "scheduler/app/config_halos.hpp"
#include "scheduler/app/config_faults.hpp"
#include "scheduler/app/config_lm.hpp"
#include "scheduler/app/config_renamed.hpp"
#include "scheduler/app/config_schema.hpp"
#include "scheduler/app/config_sweep.hpp"

#include "scheduler/app/config_toml.hpp"
#include "scheduler/app/config_torch.hpp"
#include "scheduler/app/config_transport.hpp"
#include "scheduler/app/config_virtual.hpp"
#include "scheduler/app/run_id.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ps_wiring.hpp"

#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace gradwire::scheduler {

using config_toml::apply_override;
using config_toml::for_each_leaf;
using config_toml::reader;
using config_toml::walk;
using config_toml::where;

namespace {

void read_experiment(reader& r, run_config& c) {
  c.name = r.str("experiment.name");
  check(!c.name.empty() && c.name.find('/') == std::string::npos && c.name.find('\\') == std::string::npos &&
          c.name != "." && c.name != "..",
        r.loc("experiment.name") + " = \"" + c.name + "\" must be a plain name (no '/', not '.' or '..'): it names " +
          "the results folder results/<name>");
  c.seed = static_cast<std::uint64_t>(r.integer("experiment.seed"));
  c.out = r.str("experiment.out");
  c.run_id = r.str("experiment.run_id");
  check_run_id(c.run_id, r.loc("experiment.run_id"));
  c.tensorboard = r.boolean("experiment.tensorboard");
  if (c.out.empty())
    c.out = "results/" + c.name;

}

void read_model_and_data(reader& r, run_config& c) {
  c.model.kind = r.str("model.kind");
  c.model.hidden.clear();
  const auto& hidden = r.get("model.hidden");
  for (const auto& e : *hidden.as_array()) {
    auto w = e.value<std::int64_t>().value_or(0);
    check(w > 0 && w <= 65536, r.loc("model.hidden") + ": widths must be in [1, 65536], got " + std::to_string(w));
    c.model.hidden.push_back(static_cast<int>(w));
  }
  read_transformer(r, c);

  c.dataset = r.str("data.dataset");
  c.data_path = r.str("data.path");
  c.if_missing = r.str("data.if_missing");
  c.train_subset = r.integer("data.train_subset");
  c.test_subset = r.integer("data.test_subset");
  c.synthetic_train = r.integer("data.synthetic_train");
  c.synthetic_test = r.integer("data.synthetic_test");
  c.normalize = r.boolean("data.normalize");
  c.val_fraction = r.number("data.val_fraction");
  c.partition.kind = r.str("data.partition");
  c.partition.alpha = r.number("data.dirichlet_alpha");
  c.partition.classes = static_cast<int>(r.integer("data.classes_per_worker"));
  const bool gpt = c.model.kind == "gpt", text = c.dataset == "text" || c.dataset == "tokens";
  check(gpt == text || c.model.kind == "torch", r.loc(gpt ? "data.dataset" : "model.kind") + ": model.kind = \"gpt\" trains on data.dataset = \"text\" or \"tokens\", and only it does (model.kind = \"" +
                       c.model.kind + "\", data.dataset = \"" + c.dataset + "\")");
  check(gpt || c.model.dropout == 0.f, r.loc("model.dropout") + ": dropout is the GPT's (model.kind = \"gpt\"), not " +
                                         c.model.kind + "'s");
  check_text_partition(r, c, text);
}

void read_train(reader& r, run_config& c) {
  c.epochs = static_cast<int>(r.integer("train.epochs"));
  c.max_steps = r.integer("train.max_steps");
  c.shared_budget = r.str("train.budget") == "shared";
  c.eval_mode = r.str("train.eval");
  c.batch_size = static_cast<int>(r.integer("train.batch_size"));
  c.opt.kind = r.str("train.optimizer");
  c.opt.lr = static_cast<float>(r.number("train.lr"));
  c.opt.momentum = static_cast<float>(r.number("train.momentum"));
  c.opt.nesterov = r.boolean("train.nesterov");
  c.opt.weight_decay = static_cast<float>(r.number("train.weight_decay"));
  read_optimizer_extras(r, c);
  c.lr_schedule = r.str("train.lr_schedule");
  c.lr_step_epochs = r.number("train.lr_step_epochs");
  c.lr_step_factor = r.number("train.lr_step_factor");
  c.warmup_epochs = r.number("train.warmup_epochs");
  c.momentum_warmup_epochs = r.number("train.momentum_warmup_epochs");
  c.lr_base_batch = static_cast<int>(r.integer("train.lr_base_batch"));
  check(c.warmup_steps == 0 || c.warmup_epochs == 0,
        r.loc("train.warmup_steps") + ": give warmup_epochs or warmup_steps, not both");
  check(c.opt.accumulate <= c.batch_size, r.loc("train.accumulate") + ": " + std::to_string(c.opt.accumulate) +
                                            " micro-batches of a batch of " + std::to_string(c.batch_size) +
                                            " samples (train.batch_size): each needs one sample at least");
  check(c.lr_schedule != "step" || c.lr_step_epochs > 0,
        r.loc("train.lr_schedule") + ": lr_schedule = \"step\" needs train.lr_step_epochs > 0");
  c.target_accuracy = r.number("train.target_accuracy");
  c.threads = static_cast<int>(r.integer("train.threads"));
  c.parallelism = r.str("train.parallelism");
  c.device = r.str("train.device");
  c.device_where = r.loc("train.device");
  try {
    kernels::parse_device(c.device);
  } catch (const error& e) {
    throw error(r.loc("train.device") + ": " + e.what());
  }
  c.precision = r.str("train.precision");
  c.precision_where = r.loc("train.precision");
  c.step_timeout_ms = static_cast<std::int64_t>(r.number("train.step_timeout_s") * 1000.0);
  c.stop_wait_ms = static_cast<std::int64_t>(r.number("train.stop_wait_s") * 1000.0);
  c.log_every = static_cast<int>(r.integer("train.log_every"));
  c.trace = r.boolean("experiment.trace");
  c.trace_spans = static_cast<int>(r.integer("experiment.trace_spans"));
  c.record = r.boolean("experiment.record");
  c.record_max_mb = r.integer("experiment.record_max_mb");
  c.eval_every = static_cast<int>(r.integer("train.eval_every"));
  c.eval_steps = r.integer("train.eval_steps");
  c.checkpoint_every = r.integer("train.checkpoint_every");
  c.checkpoint_every_s = r.number("train.checkpoint_every_s");
  check(c.checkpoint_every == 0 || c.checkpoint_every_s == 0,
        r.loc("train.checkpoint_every_s") + ": give checkpoint_every (steps) or checkpoint_every_s (seconds), not both");
  c.keep_checkpoints = static_cast<int>(r.integer("train.keep_checkpoints"));
  c.min_workers = static_cast<int>(r.integer("train.min_workers"));
  c.restarts = static_cast<int>(r.integer("train.restarts"));

}

/// Gossip's keys: the rule, the graph, its compression.
void read_gossip(reader& r, run_config& c) {
  c.gossip.mode = r.str("topology.gossip.mode") == "adpsgd" ? actors::gossip_mode::adpsgd : actors::gossip_mode::dpsgd;
  c.gossip.graph = r.str("topology.gossip.graph");
  if (c.gossip.graph == "exponential" && c.family == &gossip_family) {
    check(c.workers >= 2 && (c.workers & (c.workers - 1)) == 0,
          r.loc("topology.gossip.graph") + " = \"exponential\" needs a power of 2 of workers, and topology.workers = " +
            std::to_string(c.workers));
    check(c.gossip.mode == actors::gossip_mode::dpsgd,
          r.loc("topology.gossip.graph") + " = \"exponential\" is D-PSGD's one-peer schedule; AD-PSGD picks its own peers "
            "(use ring, torus, random or complete)");
  }
  c.gossip.degree = static_cast<int>(r.integer("topology.gossip.degree"));
  c.gossip.graph_seed = static_cast<std::uint64_t>(r.integer("topology.gossip.graph_seed"));
  check(c.gossip.graph_seed == 0 || (c.gossip.graph == "random" && c.gossip.mode == actors::gossip_mode::dpsgd),
        r.loc("topology.gossip.graph_seed") + ": graphs redrawn every step are D-PSGD's on topology.gossip.graph = \"random\" " +
          "(topology.gossip.mode = \"dpsgd\")");
  c.gossip.rule = r.str("topology.gossip.compression") == "naive" ? models::gossip_rule::naive : models::gossip_rule::choco;
  c.gossip.consensus_lr = static_cast<float>(r.number("topology.gossip.consensus_lr")); // 0: by the mode
}


void read_topology(reader& r, run_config& c) {
  c.topology = r.str("topology.kind"); // one of the schema's names: "single" or a registry family
  c.family = find_family(c.topology);
  c.mode = r.str("topology.ps.mode");
  c.workers = static_cast<int>(r.integer("topology.workers"));
  // A worker count asked for on the command line (or a sweep's axis) that
  // a single worker would ignore: every point of a scaling sweep the same run.
  check(!c.single() || c.workers == 1 || r.overridden.count("topology.workers") == 0,
        r.loc("topology.workers") + " = " + std::to_string(c.workers) +
          ", but topology.kind = \"single\" trains one worker: choose a topology of several workers "
          "(e.g. --set topology.kind=\"ring\")");
  auto& ps = c.ps;
  ps.shards = static_cast<int>(r.integer("topology.ps.shards"));
  ps.sync = c.mode == "sync";
  ps.staleness_lr = r.boolean("topology.ps.staleness_lr");
  const auto local_steps = static_cast<int>(r.integer("topology.local_steps"));
  ps.local_steps = c.family && c.family->takes_local_steps ? local_steps : 0;
  ps.outer = c.family == &diloco_family;
  check(!ps.outer || c.mode != "ssp",
        r.loc("topology.ps.mode") + " = \"ssp\": DiLoCo runs \"sync\" (the shards average each round) or \"async\" "
                                 "(each worker's pseudo-gradient applied as it comes); SSP bounds a parameter server's steps");
  ps.outer_lr = static_cast<float>(r.number("topology.diloco.outer_lr"));
  ps.outer_momentum = static_cast<float>(r.number("topology.diloco.outer_momentum"));
  read_async_outer(r, c);
  read_streaming(r, c);
  const auto bound = static_cast<int>(r.integer("topology.ps.staleness_bound"));
  ps.staleness_bound = c.mode == "ssp" ? bound : -1;
  ps.dc_lambda = static_cast<float>(r.number("topology.ps.dc_lambda"));
  ps.push_pull = r.boolean("topology.ps.push_pull");
  ps.backup = static_cast<int>(r.integer("topology.ps.backup_workers"));
  ps.spread_shards = r.str("topology.ps.shard_placement") != "rank0";
  c.shards_per_host = r.str("topology.ps.shard_placement") == "per-host";
  check(ps.backup < c.workers, r.loc("topology.ps.backup_workers") + ": " + std::to_string(ps.backup) +
                                        " backup workers leave none of the " + std::to_string(c.workers) + " workers to wait for");
  auto& ring = c.ring;
  ring.bucket_floats = static_cast<std::size_t>(r.integer("topology.ring.bucket_kb")) * 256;
  ring.chunk_floats = static_cast<std::size_t>(r.integer("topology.ring.chunk_kb")) * 256;
  ring.overlap = r.boolean("topology.ring.overlap");
  check(!ring.overlap || c.opt.on_nonfinite != "skip",
        r.loc("train.on_nonfinite") + " = \"skip\" drops a step's whole gradient, but topology.ring.overlap sends its "
                                      "buckets while backward still runs: choose one");
  const auto path = r.str("topology.ring.allreduce");
  ring.path = path == "collective" ? actors::allreduce_path::collective
              : path == "actors"   ? actors::allreduce_path::actors
                                   : actors::allreduce_path::automatic;
  ring.balance_every = static_cast<int>(r.integer("topology.ring.balance_every"));
  ring.sharded_update = r.boolean("topology.ring.sharded_update");
  ring.group_size = static_cast<int>(r.integer("topology.group_size")); // 0: by host
  check(ring.balance_every == 0 || (c.family && c.family->splits_batch),
        r.loc("topology.ring.balance_every") + ": speed balancing splits the global batch of a synchronous allreduce "
                                          "(topology.kind ring or hierarchical), not " + c.topology);
  read_gossip(r, c);
  c.same_init = r.boolean("topology.same_init");
}

/// [[nodes]] groups: each checked, naming the group's line.
void read_nodes(const toml::table& root, const std::string& source, run_config& c) {
  const auto* groups = root.get_as<toml::array>("nodes");
  if (!groups)
    return;
  {
    int total = 0;
    for (std::size_t i = 0; i < groups->size(); ++i) {
      const auto& t = *groups->get(i)->as_table();
      const std::string loc = where(source, *groups->get(i)) + ": [[nodes]] #" + std::to_string(i + 1);
      node_group g;
      g.where = loc;
      g.name = t["name"].value_or(std::string("group") + std::to_string(i));
      // The schema's ranges were checked where the values are written.
      auto whole = [&](const char* key, std::int64_t dflt) { return static_cast<int>(t[key].value_or(dflt)); };
      g.count = whole("count", 1);
      g.slowdown = t["slowdown"].value_or(1.0);
      g.batch_size = whole("batch_size", 0);
      g.delay_ms = t["delay_ms"].value_or(0.0);
      g.jitter_ms = t["jitter_ms"].value_or(0.0);
      g.device = t["device"].value_or(std::string());
      g.threads = whole("threads", 0);
      g.lr_scale = t["lr_scale"].value_or(1.0);
      g.step_ms = t["step_ms"].value_or(0.0);
      if (!g.device.empty()) {
        try {
          kernels::parse_device(g.device);
        } catch (const std::exception& e) {
          throw error(loc + ": device: " + e.what());
        }
      }
      total += g.count;
      c.nodes.push_back(g);
    }
    check(total == c.workers, source + ": the [[nodes]] groups describe " + std::to_string(total) +
                                " worker(s) but topology.workers = " + std::to_string(c.workers));
    check(!c.single(),
          source + ": [[nodes]] needs several workers: a topology.kind other than \"single\"");
  }
}

/// bf16 compute is a GPU's: every worker's device must be a cuda one.
void check_precision(const run_config& c) {
  if (c.precision != "bf16")
    return;
  const auto on_gpu = [](const std::string& d) { return !kernels::parse_device(d).is_cpu(); };
  const std::string why = c.precision_where + " = \"bf16\" computes on a GPU's Tensor Cores (CPU workers compute in fp32)";
  if (c.nodes.empty())
    check(on_gpu(c.device), why + ", but " + c.device_where + " = \"" + c.device + "\"");
  for (const auto& g : c.nodes) {
    const auto& d = g.device.empty() ? c.device : g.device;
    check(on_gpu(d), why + ", but " + g.where + " (group '" + g.name + "') runs on \"" + d + "\"");
  }
}

/// Every schema key with its effective value, as config.toml records it.
std::string resolved_toml(reader& r, const run_config& c) {
  // Resolved config: every schema key with its effective value.
  toml::table resolved;
  for (const auto& k : config_schema()) {
    if (k.key.rfind("nodes.", 0) == 0 || k.key.rfind("faults.", 0) == 0)
      continue; // per group or entry, below
    // A family's key (topology.halos.local_lr) goes into its own table,
    // [topology.halos], where a reader looks it up by its dotted path.
    const auto dot = k.key.rfind('.');
    config_toml::table_at(resolved, k.key.substr(0, dot), true)->insert_or_assign(k.key.substr(dot + 1), r.get(k.key));
  }
  resolved["experiment"].as_table()->insert_or_assign("out", c.out);
  if (!c.nodes.empty()) {
    toml::array groups;
    for (const auto& g : c.nodes)
      groups.push_back(toml::table{{"name", g.name}, {"count", g.count}, {"slowdown", g.slowdown},
                                   {"batch_size", g.batch_size}, {"delay_ms", g.delay_ms},
                                   {"jitter_ms", g.jitter_ms}, {"device", g.device}, {"threads", g.threads}});
    resolved.insert_or_assign("nodes", std::move(groups));
  }
  if (!c.faults.empty()) {
    resolved.insert_or_assign("faults", faults_toml(c));
  }
  resolve_torch(r.root, c, resolved);
  std::ostringstream os;
  os << resolved;
  return os.str() + "\n";
}

} // namespace

run_config parse_config(const std::string& text, const std::string& source,
                        const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw error(source + ":" + std::to_string(e.source().begin.line) + ":" +
                std::to_string(e.source().begin.column) + ": TOML syntax error: " +
                std::string(e.description()));
  }
  // [sweep] is kept apart from the run's own keys.
  auto sweep = take_sweep(root, source);
  move_renamed_keys(root, source);
  walk(root, "", source);
  std::set<std::string> overridden;
  for (const auto& o : overrides)
    apply_override(root, o, overridden);
  reader r{root, source, overridden, {}};
  run_config c;
  c.source = source;
  c.overridden = overridden;
  read_experiment(r, c);
  read_model_and_data(r, c);
  read_train(r, c);
  read_topology(r, c);
  check(c.checkpoint_every == 0 || c.ps.local_steps == 0 || c.checkpoint_every % c.ps.local_steps == 0,
        r.loc("train.checkpoint_every") + ": local SGD checkpoints at the end of an averaging round: " +
          std::to_string(c.checkpoint_every) + " is not a multiple of topology.local_steps = " +
          std::to_string(c.ps.local_steps));
  read_transport(r, c);
  read_nodes(root, source, c);
  check_precision(c);
  read_faults(root, source, c);
  read_virtual(r, c);
  read_halos(r, c);
  if (c.family && c.family->sums_buckets && c.ring.path == actors::allreduce_path::collective) {
    const auto why = actors_ring_needed(c);
    check(why.empty(), r.loc("topology.ring.allreduce") + " = \"collective\" cannot serve " + why +
                         ": set topology.ring.allreduce = \"actors\"");
  }
  read_torch(r, c);
  c.resolved_toml = resolved_toml(r, c);
  c.model.config_toml = c.resolved_toml;
  check_fragments(r, c); // (a torch model's tensors are known once its module has its config)
  if (c.ps.python_rule())
    c.ps.rule_config = c.resolved_toml;
  c.sweep = std::move(sweep.grid);
  c.sweep_variants = std::move(sweep.variants);
  c.sweep_paired = sweep.paired;
  return c;
}

std::string actors_ring_needed(const run_config& c) {
  if (c.ring.wire_bf16)
    return "transport.wire_dtype = \"bf16\" (the communicator sums fp32)";
  bool equal = true;
  for (const auto& g : c.nodes)
    equal = equal && (g.batch_size > 0 ? g.batch_size : c.batch_size) == c.batch_size;
  if (c.min_workers > 0 && c.family && !c.family->has_groups && !c.ring.overlap && !c.ring.sharded_update &&
      c.ring.balance_every == 0 && equal)
    return "train.min_workers > 0 (a ring that re-forms without a lost worker)";
  if (c.rejoin_s > 0 || c.restarts > 0)
    return "transport.rejoin_s or train.restarts (a rank let back in)";
  for (const auto& f : c.faults)
    if (f.kind == fault_kind::delay || f.kind == fault_kind::drop || f.kind == fault_kind::partition)
      return "[[faults]] kind = \"" + to_string(f.kind) + "\" (it acts on the actors' messages)";
  return {};
}

run_config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  // A config is a regular file of reasonable size: not a directory (which
  // reads as empty and would train the defaults), not /dev/zero.
  constexpr std::uintmax_t max_bytes = 1 << 20;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  check(!ec && std::filesystem::exists(status), "config file " + path + " does not exist");
  check(std::filesystem::is_regular_file(status),
        "config file " + path + " is not a regular file" +
          (std::filesystem::is_directory(status) ? " (a directory: give the .toml file inside it)" : ""));
  const auto size = std::filesystem::file_size(path, ec);
  check(!ec && size <= max_bytes, "config file " + path + " is " + std::to_string(size) + " bytes: more than " +
                                    std::to_string(max_bytes) + " is not a config");
  std::ifstream in(path);
  check(in.good(), "cannot read config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, overrides);
}

run_config load_config_of_survivors(const std::string& path, const std::vector<std::string>& overrides, int workers) {
  auto cfg = load_config(path, overrides); // every check, in the file's own terms
  toml::table root = toml::parse(cfg.resolved_toml, path);
  root.erase("faults");
  std::ostringstream text;
  text << root;
  auto more = overrides;
  more.push_back("topology.workers=" + std::to_string(workers));
  return parse_config(text.str(), path, more);
}

std::string describe_keys() {
  std::ostringstream os;
  std::string section;
  for (const auto& k : config_schema()) {
    auto s = k.key.substr(0, k.key.find('.'));
    if (s != section) {
      os << (section.empty() ? "" : "\n") << "[" << s << "]\n";
      section = s;
    }
    os << "  " << k.key.substr(k.key.find('.') + 1) << " = " << k.default_value;
    os << std::string(k.key.size() + k.default_value.size() < 34 ? 34 - k.key.size() - k.default_value.size() : 1, ' ');
    os << "# " << k.doc;
    if (k.range != any_value)
      os << " [" << shown_value(k.range.first, k.type) << ", " << shown_value(k.range.second, k.type) << "]";
    if (!k.allowed.empty()) {
      os << " (";
      for (std::size_t i = 0; i < k.allowed.size(); ++i)
        os << (i ? " | " : "") << k.allowed[i];
      os << ")";
    }
    os << "\n";
  }
  return os.str();
}

models::optimizer_spec optimizer_for(const run_config& cfg, std::int64_t steps_per_epoch, std::int64_t total_steps,
                                     int global_batch) {
  auto o = cfg.opt;
  if (o.kind == "adamw") {
    const auto l = models::layout_of(cfg.model);
    o.decay = models::decay_ranges(l.specs, l.offsets);
  }
  if (cfg.lr_base_batch > 0)
    o.lr = static_cast<float>(o.lr * static_cast<double>(global_batch) / cfg.lr_base_batch);
  auto& s = o.schedule;
  const auto steps = [&](double epochs) {
    return epochs > 0 ? std::max<std::int64_t>(1, std::llround(epochs * static_cast<double>(steps_per_epoch))) : 0;
  };
  s.kind = cfg.lr_schedule;
  s.total_steps = total_steps;
  s.step_every = steps(cfg.lr_step_epochs);
  s.step_factor = static_cast<float>(cfg.lr_step_factor);
  s.warmup_steps = cfg.warmup_steps > 0 ? cfg.warmup_steps : steps(cfg.warmup_epochs);
  s.momentum_warmup_steps = steps(cfg.momentum_warmup_epochs);
  return o;
}

} // namespace gradwire::scheduler
