// Fuzz target: model.safetensors as `gradwire eval` reads it: the 8-byte
// header length, the JSON header, every tensor's dtype, shape and byte
// offsets against the file. Anything it does not accept must be a
// gradwire::error naming the file, never a crash or a read past the data.
#include "fuzz_target.hpp"
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/app/model_file.hpp"

#include <string>

using namespace gradwire;

namespace {
std::int64_t loaded = 0, refused = 0;

/// A small MLP (2x2 inputs, 3 hidden, 2 classes): files of a few hundred bytes.
models::model_spec small() {
  models::model_spec s;
  s.kind = "mlp";
  s.hidden = {3};
  s.channels = 1;
  s.height = s.width = 2;
  s.classes = 2;
  return s;
}
models::model& target() {
  static models::model m(small(), kernels::device::cpu(), 1);
  return m;
}
} // namespace

namespace gwfuzz {
depth reached() {
  return {std::to_string(loaded) + " loaded, " + std::to_string(refused) + " refused", loaded > 0 && refused > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() {
  const auto& m = target();
  const auto s = scheduler::safetensors_of(m, m.params().data(), m.state().data(), {{"gradwire_model", "mlp"}});
  return {std::vector<std::uint8_t>(s.begin(), s.end())};
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)scheduler::model_metadata_of(bytes, "fuzz.safetensors");
    scheduler::load_model_bytes(bytes, "fuzz.safetensors", target());
    ++loaded;
  } catch (const error&) {
    ++refused;
  }
  return 0;
}
