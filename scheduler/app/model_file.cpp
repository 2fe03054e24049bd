#include "scheduler/app/model_file.hpp"

#include "kernels/error.hpp"
#include "models/trainer.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/data_source.hpp"
#include "scheduler/app/evaluator.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <set>
#include <fstream>
#include <sstream>

namespace gradwire::scheduler {

namespace {

/// The largest header gradwire reads (its own are a few KB to a few 100 KB).
constexpr std::uint64_t max_header_bytes = std::uint64_t{64} << 20;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot read model file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct parsed {
  nlohmann::json header;
  std::size_t data_at = 0; ///< where the data section starts
};

parsed parse(const std::string& path, const std::string& bytes) {
  check(bytes.size() >= 8, path + ": not a safetensors file (" + std::to_string(bytes.size()) + " bytes)");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = n << 8 | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  check(n <= max_header_bytes && n <= bytes.size() - 8,
        path + ": header of " + std::to_string(n) + " bytes in a file of " + std::to_string(bytes.size()) +
          " (truncated, or not a safetensors file)");
  parsed p;
  p.header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr, false);
  check(!p.header.is_discarded() && p.header.is_object(), path + ": the header is not a JSON object");
  p.data_at = 8 + static_cast<std::size_t>(n);
  return p;
}

} // namespace

namespace {

/// The config without its run id: the model's bits and metadata are the
/// same for two runs that trained the same model, whichever run they were.
std::string without_run_id(std::string toml) {
  const auto at = toml.find("\nrun_id = ");
  if (at != std::string::npos)
    toml.erase(at + 1, toml.find('\n', at + 1) - at);
  return toml;
}

} // namespace

model_metadata run_metadata(const std::string& resolved_toml, const models::model_spec& spec, double input_mean,
                            double input_std) {
  auto num = [](double x) {
    std::ostringstream s;
    s.precision(17);
    s << x;
    return s.str();
  };
  return {{"format", "pt"},
          {"gradwire_model", spec.kind},
          {"gradwire_input", std::to_string(spec.channels) + "x" + std::to_string(spec.height) + "x" +
                               std::to_string(spec.width)},
          {"gradwire_classes", std::to_string(spec.classes)},
          {"gradwire_input_mean", num(input_mean)},
          {"gradwire_input_std", num(input_std)},
          {"gradwire_config", without_run_id(resolved_toml)}};
}

std::string safetensors_of(const models::model& m, const float* params, const float* state,
                           const model_metadata& metadata) {
  nlohmann::ordered_json header;
  header["__metadata__"] = metadata;
  std::string data;
  auto add = [&](const std::vector<models::param_spec>& specs, const std::vector<std::size_t>& offsets,
                 const float* base) {
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto count = static_cast<std::size_t>(kernels::numel(specs[i].shape));
      const auto begin = data.size();
      data.append(reinterpret_cast<const char*>(base + offsets[i]), count * sizeof(float)); // x86: little-endian
      header[specs[i].name] = {{"dtype", "F32"}, {"shape", specs[i].shape}, {"data_offsets", {begin, data.size()}}};
    }
  };
  add(m.param_specs(), m.param_offsets(), params);
  add(m.state_specs(), m.state_offsets(), state);
  auto text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data starts 8-aligned
  std::string out(8, '\0');
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8)
    out[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xff);
  return out + text + data;
}

model_metadata read_model_metadata(const std::string& path) { return model_metadata_of(slurp(path), path); }

model_metadata model_metadata_of(const std::string& bytes, const std::string& path) {
  const auto p = parse(path, bytes);
  model_metadata out;
  if (p.header.contains("__metadata__") && p.header["__metadata__"].is_object())
    for (const auto& [k, v] : p.header["__metadata__"].items())
      if (v.is_string())
        out[k] = v.get<std::string>();
  return out;
}

void load_model_file(const std::string& path, models::model& into) { load_model_bytes(slurp(path), path, into); }

void load_model_bytes(const std::string& bytes, const std::string& path, models::model& into) {
  check(into.dev().is_cpu(), "load_model_file: the model must be on the CPU");
  const auto p = parse(path, bytes);
  const std::size_t data_bytes = bytes.size() - p.data_at;
  auto fill = [&](const std::vector<models::param_spec>& specs, const std::vector<std::size_t>& offsets, float* base) {
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto& name = specs[i].name;
      check(p.header.contains(name), path + ": no tensor " + name + " (a file of another model?)");
      const auto& t = p.header[name];
      // (Read as json, compared as json: value() with a string default throws json's
      // own type error for a dtype of another type, naming neither file nor tensor.)
      const auto dtype = t.is_object() ? t.value("dtype", nlohmann::json()) : nlohmann::json();
      check(dtype == "F32", path + ": " + name + " is not F32 (dtype " + dtype.dump() + ")");
      check(t.contains("shape") && t["shape"] == nlohmann::json(specs[i].shape),
            path + ": " + name + " has shape " + (t.contains("shape") ? t["shape"].dump() : "?") + ", the model's is " +
              nlohmann::json(specs[i].shape).dump());
      const auto& off = t.value("data_offsets", nlohmann::json());
      const auto count = static_cast<std::size_t>(kernels::numel(specs[i].shape));
      check(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
            path + ": " + name + " has no data_offsets");
      const auto b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
      check(b <= e && e <= data_bytes && e - b == count * sizeof(float),
            path + ": " + name + "'s bytes [" + std::to_string(b) + ", " + std::to_string(e) + ") do not fit " +
              std::to_string(count) + " floats in the " + std::to_string(data_bytes) + " bytes of data");
      std::memcpy(base + offsets[i], bytes.data() + p.data_at + b, count * sizeof(float));
    }
  };
  fill(into.param_specs(), into.param_offsets(), into.params().data());
  if (!into.state_specs().empty())
    fill(into.state_specs(), into.state_offsets(), into.state().data());
  std::set<std::string> known;
  for (const auto* specs : {&into.param_specs(), &into.state_specs()})
    for (const auto& s : *specs)
      known.insert(s.name);
  for (const auto& [name, t] : p.header.items())
    check(name == "__metadata__" || known.count(name),
          path + ": holds a tensor " + name + " that this model (" + std::to_string(known.size()) +
            " tensors) has no place for (a file of another model, or one edited?)");
}

std::string first_non_finite(models::model& m) {
  auto scan = [](const std::vector<models::param_spec>& specs, const std::vector<std::size_t>& offsets,
                 const float* base) -> std::string {
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto count = static_cast<std::size_t>(kernels::numel(specs[i].shape));
      for (std::size_t j = 0; j < count; ++j)
        if (!std::isfinite(base[offsets[i] + j]))
          return specs[i].name + " (element " + std::to_string(j) + " is " + std::to_string(base[offsets[i] + j]) + ")";
    }
    return "";
  };
  auto bad = scan(m.param_specs(), m.param_offsets(), m.params().data());
  if (bad.empty() && !m.state_specs().empty())
    bad = scan(m.state_specs(), m.state_offsets(), m.state().data());
  return bad;
}

model_eval evaluate_model_file(std::string path, const std::vector<std::string>& overrides) {
  if (std::filesystem::is_directory(path))
    path += "/model.safetensors";
  const auto md = read_model_metadata(path);
  const auto it = md.find("gradwire_config");
  check(it != md.end(), path + ": no gradwire_config in the header's metadata (not written by gradwire)");
  auto cfg = parse_config(it->second, path + " (its config)", overrides);
  auto data = load_data(cfg);
  models::model m(cfg.model, kernels::device::cpu(), cfg.seed);
  check(md.count("gradwire_model") == 0 || md.at("gradwire_model") == cfg.model.kind,
        path + ": the file holds a " + md.at("gradwire_model") + ", its config a " + cfg.model.kind);
  load_model_file(path, m);
  models::trainer t(m, cfg.opt, cfg.threads);
  const auto e = t.evaluate(data.test, 0, eval_batch_of(cfg));
  return {path, cfg.dataset, e.samples, e.accuracy, e.loss};
}

} // namespace gradwire::scheduler
