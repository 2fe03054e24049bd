// libgradwire_torch.so (models/torch_module.hpp): the user's nn.Module run
// by an embedded Python. bridge.py does the torch side; this file starts
// the interpreter once per process (or uses the one a Python program
// already runs, as the gradwire Python module's runs do), holds the GIL
// for each call alone, and turns Python's errors into std::runtime_error.
#include "models/torch_module.hpp"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <stdexcept>

namespace py = pybind11;

extern const char* const gradwire_torch_bridge_py; // bridge.py's text (CMake: bridge_py.cpp)

namespace gradwire::models::torch_module {

namespace {

py::object* g_bridge = nullptr; // bridge.py as a module; never destroyed (the interpreter outlives every run)

void start() {
  static std::once_flag once;
  std::call_once(once, [] {
    const bool ours = !Py_IsInitialized();
    if (ours)
      py::initialize_interpreter(false); // no signal handlers: SIGINT and SIGTERM stay gradwire's
    {
      py::gil_scoped_acquire gil;
      if (ours)
        py::module_::import("sys").attr("argv") = py::make_tuple("gradwire");
      py::module_ mod = py::module_::import("types").attr("ModuleType")("gradwire_torch_bridge");
      py::exec(gradwire_torch_bridge_py, mod.attr("__dict__"));
      g_bridge = new py::object(mod);
    }
    if (ours)
      PyEval_SaveThread(); // every call takes the GIL for itself, from any thread
  });
}

/// Runs `f` with the GIL held; a Python exception becomes std::runtime_error
/// with bridge.UserError's text (the user's traceback) or Python's own.
template <typename F>
auto guarded(F&& f) {
  py::gil_scoped_acquire gil;
  try {
    return f();
  } catch (py::error_already_set& e) {
    if (e.matches(g_bridge->attr("UserError")))
      throw std::runtime_error(py::str(e.value()).cast<std::string>());
    throw std::runtime_error(std::string("torch model: ") + e.what());
  }
}

py::memoryview floats(const float* p, std::size_t n) {
  return py::memoryview::from_memory(const_cast<float*>(p), static_cast<py::ssize_t>(n * sizeof(float)), false);
}

std::size_t numel(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape)
    n *= static_cast<std::size_t>(d);
  return n;
}

/// Drops a Python reference with the GIL held (destructors run on any
/// thread). After the interpreter ended (a Python program that ran gradwire
/// exits), the reference is let go without a call into Python.
void release(py::object& o) {
  if (!Py_IsInitialized()) {
    o.release();
    return;
  }
  py::gil_scoped_acquire gil;
  o = py::object();
}

class py_replica final : public replica {
public:
  py_replica(py::object r, const std::vector<tensor_info>& params, const std::vector<tensor_info>& buffers)
    : r_(std::move(r)), params_(params), buffers_(buffers) {}
  ~py_replica() override { release(r_); }

  void bind_param(std::size_t i, float* value, float* grad) override {
    const auto n = numel(params_.at(i).shape);
    guarded([&] { return r_.attr("bind_param")(i, floats(value, n), floats(grad, n)); });
  }
  void bind_buffer(std::size_t i, float* value) override {
    const auto n = numel(buffers_.at(i).shape);
    guarded([&] { return r_.attr("bind_buffer")(i, floats(value, n)); });
  }
  std::vector<std::int64_t> forward(const float* x, const std::vector<std::int64_t>& shape, bool train) override {
    out_shape_ = guarded([&] {
      return r_.attr("forward")(floats(x, numel(shape)), shape, train).cast<std::vector<std::int64_t>>();
    });
    return out_shape_;
  }
  void output(float* out) override {
    guarded([&] { return r_.attr("output")(floats(out, numel(out_shape_))); });
  }
  void backward(const float* dy) override {
    guarded([&] { return r_.attr("backward")(floats(dy, numel(out_shape_))); });
  }
  std::pair<double, std::int64_t> loss(const std::int32_t* targets, float scale, float* d_out) override {
    const auto rows = numel(out_shape_) / static_cast<std::size_t>(out_shape_.back());
    return guarded([&] {
      auto ts = py::memoryview::from_memory(const_cast<std::int32_t*>(targets), static_cast<py::ssize_t>(rows * sizeof(std::int32_t)), false);
      py::object d = d_out != nullptr ? py::object(floats(d_out, numel(out_shape_))) : py::object(py::none());
      return r_.attr("loss")(ts, scale, d).cast<std::pair<double, std::int64_t>>();
    });
  }

private:
  py::object r_;
  const std::vector<tensor_info>& params_;
  const std::vector<tensor_info>& buffers_;
  std::vector<std::int64_t> out_shape_;
};

std::vector<tensor_info> infos(const py::handle& list) {
  std::vector<tensor_info> out;
  for (const auto& item : list) {
    auto pair = item.cast<py::tuple>();
    out.push_back({pair[0].cast<std::string>(), pair[1].cast<std::vector<std::int64_t>>()});
  }
  return out;
}

class py_model final : public model {
public:
  explicit py_model(py::object m) : m_(std::move(m)) {
    params_ = infos(m_.attr("params"));
    buffers_ = infos(m_.attr("buffers"));
    has_loss_ = !m_.attr("loss_fn").is_none();
  }
  ~py_model() override { release(m_); }

  const std::vector<tensor_info>& params() const override { return params_; }
  const std::vector<tensor_info>& buffers() const override { return buffers_; }
  void initial(std::uint64_t seed, bool buffer, std::size_t i, float* out) override {
    const auto n = numel((buffer ? buffers_ : params_).at(i).shape);
    guarded([&] { return m_.attr("initial")(seed, buffer, i, floats(out, n)); });
  }
  std::unique_ptr<replica> make_replica() override {
    auto r = guarded([&] { return m_.attr("replica")(); });
    return std::make_unique<py_replica>(std::move(r), params_, buffers_);
  }
  bool has_loss() const override { return has_loss_; }
  std::vector<std::int64_t> dataset(const std::string& split) override {
    return guarded([&] { return m_.attr("dataset")(split).cast<std::vector<std::int64_t>>(); });
  }
  void take_dataset(const std::string& split, float* x, std::int32_t* y) override {
    const auto shape = guarded([&] { return m_.attr("dataset_shape")(split).cast<std::vector<std::int64_t>>(); });
    const auto items = static_cast<std::size_t>(shape.at(0));
    guarded([&] {
      auto ys = py::memoryview::from_memory(y, static_cast<py::ssize_t>(items * sizeof(std::int32_t)), false);
      return m_.attr("take_dataset")(split, floats(x, numel(shape)), ys);
    });
  }

private:
  py::object m_;
  std::vector<tensor_info> params_, buffers_;
  bool has_loss_ = false;
};

std::shared_ptr<model> open(const std::string& path, const std::string& config_toml, int threads,
                            const std::string& device) {
  try {
    start();
  } catch (py::error_already_set& e) {
    throw std::runtime_error(std::string("torch models: the embedded Python could not start: ") + e.what());
  }
  auto m = guarded([&] { return g_bridge->attr("load")(path, config_toml, threads, device); });
  return guarded([&] { return std::make_shared<py_model>(std::move(m)); });
}

class py_rule final : public rule {
public:
  explicit py_rule(py::object r) : r_(std::move(r)) {}
  ~py_rule() override { release(r_); }
  std::optional<float> push(float* params, float* grad, std::size_t n, int rank, std::int64_t staleness,
                            std::int64_t version) override {
    return guarded([&]() -> std::optional<float> {
      auto out = r_.attr("push")(floats(params, n), floats(grad, n), rank, staleness, version);
      if (out.is_none())
        return std::nullopt;
      return out.cast<float>();
    });
  }

private:
  py::object r_;
};

std::shared_ptr<rule> open_rule(const std::string& path, const std::string& cls, const std::string& config_toml) {
  try {
    start();
  } catch (py::error_already_set& e) {
    throw std::runtime_error(std::string("topology.ps.rule: the embedded Python could not start: ") + e.what());
  }
  auto r = guarded([&] { return g_bridge->attr("load_rule")(path, cls, config_toml); });
  return guarded([&] { return std::make_shared<py_rule>(std::move(r)); });
}

const api the_api{GRADWIRE_TORCH_ABI, &open, &open_rule};

} // namespace

} // namespace gradwire::models::torch_module

extern "C" __attribute__((visibility("default"))) const gradwire::models::torch_module::api* gradwire_torch_module() {
  return &gradwire::models::torch_module::the_api;
}
