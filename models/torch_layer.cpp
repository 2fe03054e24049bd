// model.kind = "torch" (models/torch_layer.hpp): the layer, and the loader of
// libgradwire_torch.so: $GRADWIRE_TORCH_MODULE, else next to the executable
// or one folder up (build/ holds it; tests/ is below), else installed, else
// where this build put it.
#include "models/torch_layer.hpp"

#include "kernels/error.hpp"
#include "kernels/module_paths.hpp"
#include "models/network.hpp"
#include "models/torch_module.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

namespace gradwire::models {

namespace tm = torch_module;

namespace {

struct loaded {
  const tm::api* api = nullptr;
  std::string error; ///< why api is null
};

std::vector<std::string> candidates() {
#ifdef GRADWIRE_TORCH_MODULE_PATH
  return kernels::module_paths("GRADWIRE_TORCH_MODULE", tm::file_name, GRADWIRE_TORCH_MODULE_PATH);
#else
  return kernels::module_paths("GRADWIRE_TORCH_MODULE", tm::file_name, nullptr);
#endif
}

loaded load() {
  loaded out;
  std::string tried;
  for (const auto& path : candidates()) {
    if (::access(path.c_str(), F_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    // RTLD_GLOBAL: Python's extension modules (torch's among them) resolve
    // libpython's symbols through the global scope.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      out.error = "the torch plug-in (" + path + ") could not be loaded: " + (why != nullptr ? why : "dlopen failed");
      return out;
    }
    auto entry = reinterpret_cast<const tm::api* (*)()>(::dlsym(handle, tm::entry));
    const tm::api* api = entry != nullptr ? entry() : nullptr;
    if (api == nullptr) {
      out.error = path + " is not gradwire's torch plug-in (no " + tm::entry + ")";
    } else if (std::strcmp(api->abi, GRADWIRE_TORCH_ABI) != 0) {
      out.error = path + " was built from another models/torch_module.hpp: rebuild, or point GRADWIRE_TORCH_MODULE at this build's";
    } else {
      out.api = api; // kept for the process's life, as the models it opens are
    }
    return out;
  }
  out.error = std::string("the torch plug-in (") + tm::file_name + ") was not found; looked for " + tried +
              " (it is built where Python 3 with pybind11 and PyTorch are found: Debian's pybind11-dev, python3-dev, "
              "python3-torch, as scripts/setup.sh installs them; or set GRADWIRE_TORCH_MODULE to its path)";
  return out;
}

const loaded& plugin() {
  static const loaded p = load();
  return p;
}

/// One open model per (file, config) in the process: every replica of a
/// run, and the network factory's descriptions, share it.
std::shared_ptr<tm::model> open_model(const model_spec& spec) {
  static std::mutex mu;
  // Never destroyed: at exit, a Python program's interpreter may already be gone.
  static auto& open = *new std::map<std::pair<std::string, std::string>, std::shared_ptr<tm::model>>;
  const auto& p = plugin();
  check(p.api != nullptr, "model.kind = \"torch\": " + p.error);
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = open[{spec.module, spec.config_toml + "\n# device " + spec.torch_device}];
  if (!slot) {
    try {
      slot = p.api->open(spec.module, spec.config_toml, spec.torch_threads, spec.torch_device);
    } catch (const std::exception& e) {
      throw error(std::string("model.module: ") + e.what());
    }
  }
  return slot;
}

template <typename F>
auto rethrown(F&& f) {
  try {
    return f();
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(e.what());
  }
}

class torch_layer final : public layer {
public:
  torch_layer(std::shared_ptr<tm::model> m, int classes, bool tokens)
      : m_(std::move(m)), classes_(classes), tokens_(tokens) {}

  std::string name() const override { return "torch"; }
  /// Logits for the dataset's classes (forward checks that they are).
  shape_t output_shape(const shape_t& in) const override { return {rows(in), classes_}; }

  void describe(std::vector<param_spec>& params, std::vector<param_spec>& state,
                const std::string& /*prefix*/) const override {
    auto add = [&](std::vector<param_spec>& out, const tm::tensor_info& t, bool buffer, std::size_t i) {
      param_spec s;
      s.name = t.name; // state_dict's names, not the network's prefix: load_state_dict takes the file as written
      s.shape = shape_t(t.shape.begin(), t.shape.end());
      s.init = init_kind::from_layer;
      s.decay = !buffer && t.shape.size() >= 2; // weight matrices and kernels, as AdamW recipes decay
      s.fill = [m = m_, buffer, i](std::uint64_t seed, float* out_values) {
        rethrown([&] { m->initial(seed, buffer, i, out_values); });
      };
      out.push_back(std::move(s));
    };
    for (std::size_t i = 0; i < m_->params().size(); ++i)
      add(params, m_->params()[i], false, i);
    for (std::size_t i = 0; i < m_->buffers().size(); ++i)
      add(state, m_->buffers()[i], true, i);
  }

  void bind(param_binder& b) override {
    layer::bind(b);
    check(b.grad_buffer().dev().is_cpu(), "model.kind = \"torch\" runs on the CPU (device = \"cpu\")");
    r_ = rethrown([&] { return m_->make_replica(); });
    grads_ = b.grad_buffer();
    for (std::size_t i = 0; i < m_->params().size(); ++i) {
      const auto& t = m_->params()[i];
      auto v = b.param("torch." + t.name, shape_t(t.shape.begin(), t.shape.end()));
      rethrown([&] { r_->bind_param(i, v.value.data(), v.grad.data()); });
    }
    for (std::size_t i = 0; i < m_->buffers().size(); ++i) {
      const auto& t = m_->buffers()[i];
      auto v = b.state("torch." + t.name, shape_t(t.shape.begin(), t.shape.end()));
      // A replica that does not own the state keeps its statistics to
      // itself, so that threads never race on the shared ones.
      if (!b.owns_state()) {
        own_state_.push_back(tensor::from(v.to_vector(), v.shape()));
        v = own_state_.back();
      }
      rethrown([&] { r_->bind_buffer(i, v.data()); });
    }
  }

  const tensor& forward(const tensor& x, bool train) override {
    check(x.type() == kernels::dtype::f32, "model.kind = \"torch\": float32 inputs expected");
    const auto& xs = x.shape();
    auto shape = rethrown([&] { return r_->forward(x.data(), std::vector<std::int64_t>(xs.begin(), xs.end()), train); });
    check(shape.size() == 2 && shape[0] == rows(xs) && shape[1] == classes_, "model.kind = \"torch\": the module's output is " +
            kernels::to_string(shape_t(shape.begin(), shape.end())) + "; " + expected(xs));
    y_ = out_buf_.get(shape_t(shape.begin(), shape.end()), x.dev());
    rethrown([&] { r_->output(y_.data()); });
    return y_;
  }

  const tensor& backward(const tensor& dy, bool need_dx) override {
    check(!need_dx, "model.kind = \"torch\": the module is the whole network (no input gradient is needed)");
    std::memset(grads_.data(), 0, grads_.bytes());
    rethrown([&] { r_->backward(dy.data()); });
    return none_;
  }

  bool has_loss() const override { return m_->has_loss(); }
  kernels::xent_result loss(const std::int32_t* labels, float scale, float* d_out) override {
    auto [sum, correct] = rethrown([&] { return r_->loss(labels, scale, d_out); });
    return {sum, correct};
  }

private:
  /// Rows of logits for an input of shape `in`: a sample's, or a window's tokens'.
  std::int64_t rows(const shape_t& in) const { return tokens_ ? in.at(0) * in.at(3) : in.at(0); }
  std::string expected(const shape_t& in) const {
    const auto n = std::to_string(in.at(0)), c = std::to_string(classes_);
    if (tokens_)
      return "model.vocab is " + c + ", so [" + n + ", " + std::to_string(in.at(3)) + ", " + c + "] (batch, " +
             "model.context, model.vocab) is expected";
    return "the dataset has " + c + " classes, so [" + n + ", " + c + "] is expected";
  }

  std::shared_ptr<tm::model> m_;
  std::int64_t classes_;
  bool tokens_;
  std::unique_ptr<tm::replica> r_;
  tensor grads_, y_, none_;
  std::vector<tensor> own_state_;
  scratch out_buf_;
};

} // namespace

std::unique_ptr<layer> make_torch_layer(const model_spec& spec) {
  check(!spec.module.empty(), "model.kind = \"torch\" needs model.module, the .py file that defines model(cfg)");
  return std::make_unique<torch_layer>(open_model(spec), spec.classes, spec.torch_tokens);
}

dataset load_torch_dataset(const model_spec& spec, const std::string& split) {
  auto m = open_model(spec);
  const auto shape = rethrown([&] { return m->dataset(split); });
  check(shape.size() >= 2 && shape.size() <= 4, "model.module: dataset(\"" + split + "\", cfg): inputs of " +
                                                   std::to_string(shape.size() - 1) + " dimensions");
  dataset d;
  d.name = "module";
  const std::vector<std::int64_t> dims(shape.begin() + 1, shape.end());
  d.channels = dims.size() == 3 ? static_cast<int>(dims[0]) : 1;
  d.height = dims.size() >= 2 ? static_cast<int>(dims[dims.size() - 2]) : 1;
  d.width = static_cast<int>(dims.back());
  d.images.resize(static_cast<std::size_t>(shape[0] * d.sample_numel()));
  d.labels.resize(static_cast<std::size_t>(shape[0]));
  rethrown([&] { m->take_dataset(split, d.images.data(), d.labels.data()); });
  d.classes = 1 + *std::max_element(d.labels.begin(), d.labels.end());
  return d;
}

std::shared_ptr<tm::rule> open_python_rule(const std::string& path, const std::string& cls,
                                           const std::string& config_toml) {
  const auto& p = plugin();
  check(p.api != nullptr, "topology.ps.rule = \"" + path + ":" + cls + "\": " + p.error);
  try {
    return p.api->open_rule(path, cls, config_toml);
  } catch (const std::exception& e) {
    throw error(e.what());
  }
}

std::string torch_unavailable() { return plugin().error; }

} // namespace gradwire::models
