#include "scheduler/app/config_torch.hpp"

#include "kernels/error.hpp"

#include <filesystem>

namespace gradwire::scheduler {

namespace fs = std::filesystem;
using config_toml::reader;

bool free_form_args(const std::string& key, const toml::node& v, const std::string& where) {
  if (key != "model.args")
    return false;
  check(v.is_table(), where + ": model.args is a table of the module's own settings: write [model.args] and "
                              "its keys below it");
  return true;
}

bool is_free_form_key(const std::string& key) {
  const std::string prefix = "model.args.";
  return key.size() > prefix.size() && key.rfind(prefix, 0) == 0;
}

namespace {

/// A .py file named by `key` as an absolute path: relative to the config
/// file's folder (to the working folder when --set gave it, or the config
/// is no file). `what` says what the file holds.
std::string py_file(reader& r, const run_config& c, const std::string& given, const std::string& key,
                    const std::string& what) {
  fs::path p(given);
  if (p.is_relative() && !c.overridden.count(key)) {
    const fs::path source(c.source);
    std::error_code ec;
    if (fs::is_regular_file(source, ec))
      p = source.parent_path() / p;
  }
  std::error_code ec;
  p = fs::absolute(p, ec).lexically_normal();
  check(fs::is_regular_file(p, ec), r.loc(key) + ": " + p.string() +
                                      (fs::exists(p, ec) ? " is not a file" : " does not exist") + " (" + key +
                                      " is the .py file that " + what + ", relative to the config file's folder)");
  return p.string();
}

/// model.module as an absolute path. A "python:" name is a function given
/// to gradwire.run(model=...), which the plug-in's bridge finds in the
/// calling interpreter.
std::string module_path(reader& r, const run_config& c, const std::string& given) {
  if (given.rfind("python:", 0) == 0)
    return given;
  return py_file(r, c, given, "model.module", "defines model(cfg)");
}

/// topology.ps.rule = "FILE.py:Class" (an async parameter server's rule in
/// Python), its file made absolute.
void read_rule(reader& r, run_config& c) {
  const std::string given = r.str("topology.ps.rule");
  if (given.empty())
    return;
  const auto colon = given.rfind(':');
  const std::string cls = colon == std::string::npos ? "" : given.substr(colon + 1);
  check(colon != std::string::npos && colon > 0 && !cls.empty() && cls.find('/') == std::string::npos,
        r.loc("topology.ps.rule") + " = \"" + given + "\": FILE.py:Class expected, the file and the class in it "
                                                    "(docs/your-algorithm.md)");
  check(c.family != nullptr && c.family->has_shards && !c.ps.sync && c.ps.local_steps == 0,
        r.loc("topology.ps.rule") + ": a rule in Python takes each push of an asynchronous parameter server "
                                 "(topology.kind = \"parameter-server\", mode \"async\" or \"ssp\"), not " +
          c.topology + (c.family && c.family->has_shards ? " in mode \"" + c.mode + "\"" : std::string()));
  check(!c.ps.staleness_lr && c.ps.dc_lambda == 0.f,
        r.loc("topology.ps.rule") + ": the rule replaces the built-in async rule, so topology.ps.staleness_lr and "
                                 "topology.ps.dc_lambda do not apply: leave them out (the rule may do the same)");
  c.ps.rule_file = py_file(r, c, given.substr(0, colon), "topology.ps.rule", "defines the rule's class");
  c.ps.rule_class = cls;
}

} // namespace

void read_torch(reader& r, run_config& c) {
  read_rule(r, c);
  const std::string given = r.str("model.module");
  const bool torch = c.model.kind == "torch";
  check(torch || given.empty(), r.loc("model.module") + ": a module file is for model.kind = \"torch\", not \"" +
                                  c.model.kind + "\"");
  check(torch || !r.root.contains("model") || !r.root["model"]["args"],
        r.loc("model.kind") + ": [model.args] is handed to a torch module (model.kind = \"torch\"), not to \"" +
          c.model.kind + "\"");
  check(torch || c.dataset != "module", r.loc("data.dataset") + ": data.dataset = \"module\" is a torch module's "
                                        "own dataset(split, cfg) (model.kind = \"torch\"), not \"" + c.model.kind + "\"'s");
  if (!torch)
    return;
  check(!given.empty(), r.loc("model.kind") + ": model.kind = \"torch\" needs model.module, the .py file that "
                                              "defines model(cfg) (docs/your-model.md)");
  c.model.module = module_path(r, c, given);
  c.model.torch_tokens = c.dataset == "text" || c.dataset == "tokens";
  // On a GPU the module is torch's to place: gradwire's buffers, and every
  // exchange, stay in host memory (the CUDA backend's staging).
  c.model.torch_device = c.device;
  c.device = "cpu";
  check(c.precision == "fp32", c.precision_where + " = \"" + c.precision + "\": a torch model computes in its own "
                                                   "dtypes (float32 parameters); use torch's autocast inside forward");
  for (const auto& g : c.nodes)
    check(g.device.empty() || g.device == c.model.torch_device,
          g.where + " (group '" + g.name + "'): device = \"" + g.device + "\", but a torch model computes where "
            "train.device = \"" + c.model.torch_device + "\" says, for every worker");
  c.model.torch_threads = c.threads;
}

void resolve_torch(const toml::table& root, const run_config& c, toml::table& resolved) {
  if (auto* ps = resolved["topology"]["ps"].as_table(); ps != nullptr && c.ps.python_rule())
    ps->insert_or_assign("rule", c.ps.rule()); // its file absolute: every rank of a job finds it
  auto* model = resolved["model"].as_table();
  if (model == nullptr || c.model.kind != "torch")
    return;
  model->insert_or_assign("module", c.model.module);
  const auto* args = root["model"]["args"].as_table();
  model->insert_or_assign("args", args != nullptr ? *args : toml::table{}); // the module always finds cfg["model"]["args"]
}

} // namespace gradwire::scheduler
