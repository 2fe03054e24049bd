#pragma once
/// @file config_torch.hpp
/// The keys of a torch model (internal to scheduler/app): model.module, the
/// user's .py file, found relative to the config file's folder and kept as
/// an absolute path, and [model.args], a free-form table the module reads
/// as cfg["model"]["args"].

#include "scheduler/app/config.hpp"
#include "scheduler/app/config_toml.hpp"

#include <toml++/toml.h>

namespace gradwire::scheduler {

/// Whether `key` is the free-form [model.args] (no schema checks below it);
/// throws when it is given as anything but a table.
bool free_form_args(const std::string& key, const toml::node& v, const std::string& where);
/// Whether `key` lies under [model.args] ("model.args.width"): any value is
/// the module's to judge, for --set and sweep axes alike.
bool is_free_form_key(const std::string& key);
/// model.module and the model kinds and datasets a torch model takes
/// (after model.kind, data.dataset and train.device are read), and
/// topology.ps.rule, a parameter-server rule in Python (after [topology]).
void read_torch(config_toml::reader& r, run_config& c);
/// The resolved config's model.module and topology.ps.rule (absolute) and [model.args].
void resolve_torch(const toml::table& root, const run_config& c, toml::table& resolved);

} // namespace gradwire::scheduler
