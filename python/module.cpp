// _gradwire: the C++ side of the `gradwire` Python module (python/gradwire/).
// It runs the command line in this process, the GIL released, and gives the
// config schema; the Python side builds the arguments and reads results.
#include "scheduler/app/cli.hpp"
#include "kernels/error.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/config_schema.hpp"
#include "scheduler/app/version.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

namespace py = pybind11;
namespace gs = gradwire::scheduler;

namespace {

/// `gradwire ARGS...` in this process: (exit status, error message or "").
py::tuple run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "gradwire");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  gs::cli_embedding embed;
  int status = 0;
  {
    py::gil_scoped_release free_python; // a run takes minutes; other Python threads (on_metrics) go on
    status = gs::cli_main(static_cast<int>(args.size()), argv.data(), &embed);
  }
  return py::make_tuple(status, embed.error);
}

/// Where a run of this config (with --set `overrides`) writes its results,
/// as the command line resolves it: (folder, "") or ("", the config's error).
py::tuple results_folder(const std::string& config, const std::vector<std::string>& overrides) {
  try {
    return py::make_tuple(gs::load_config(config, overrides).out, std::string());
  } catch (const gradwire::error& e) {
    return py::make_tuple(std::string(), std::string(e.what()));
  }
}

/// Every config key: {key: {type, default, allowed, doc, range}}; range is
/// (lo, hi) for integers and numbers that have one, else None.
py::dict schema() {
  py::dict out;
  for (const auto& k : gs::config_schema()) {
    py::dict spec;
    spec["type"] = gs::to_string(k.type);
    spec["default"] = k.default_value;
    spec["allowed"] = k.allowed;
    spec["doc"] = k.doc;
    if (k.range == gs::any_value)
      spec["range"] = py::none();
    else if (k.type == gs::value_type::integer)
      spec["range"] = py::make_tuple(static_cast<long long>(std::max(k.range.first, -9.2e18)),
                                     static_cast<long long>(std::min(k.range.second, 9.2e18)));
    else
      spec["range"] = py::make_tuple(k.range.first, k.range.second);
    out[py::str(k.key)] = spec;
  }
  return out;
}

} // namespace

PYBIND11_MODULE(_gradwire, m) {
  m.doc() = "gradwire's command line and config schema, in this process";
  m.def("run_cli", &run_cli, py::arg("args"),
        "Runs `gradwire ARGS...` here; returns (exit status, error message)");
  m.def("results_folder", &results_folder, py::arg("config"), py::arg("overrides"),
        "The results folder of a run of CONFIG with these --set overrides: (folder, error message)");
  m.def("schema", &schema, "Every config key with its type, default (TOML text), allowed values, doc and range");
  m.def("version", &gs::version);
  m.def("commit", &gs::git_commit);
  m.attr("build_exe") = GRADWIRE_BUILD_EXE; // the program beside this module in the build tree
}
