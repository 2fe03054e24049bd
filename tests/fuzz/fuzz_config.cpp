// Fuzz target: the config parser (TOML, then every key checked against the
// schema), as `gradwire run FILE` reads a file. Anything it does not
// accept must be a gradwire::error (exit 2 with file:line and key), never
// a crash, a hang or an exception of another kind.
#include "fuzz_target.hpp"
#include "kernels/error.hpp"
#include "scheduler/app/config.hpp"

#include <string>

using namespace gradwire;

namespace {
std::int64_t accepted = 0, refused = 0;
}

namespace gwfuzz {
depth reached() {
  return {std::to_string(accepted) + " accepted, " + std::to_string(refused) + " refused", accepted > 0 && refused > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() { // with the examples/ folder given on the command line
  const std::string s = "[experiment]\nname = \"fuzz\"\n[model]\nkind = \"mlp\"\nhidden = [256, 128]\n"
                        "[topology]\nkind = \"parameter-server\"\nworkers = 3\n[topology.ps]\nmode = \"async\"\n"
                        "[[nodes]]\nname = \"slow\"\ncount = 1\nslowdown = 4.0\n[[nodes]]\nname = \"fast\"\ncount = 2\n"
                        "[[faults]]\nkind = \"kill\"\nrank = 2\nat_step = 40\n[sweep]\n\"topology.workers\" = [1, 2]\n";
  return {std::vector<std::uint8_t>(s.begin(), s.end())};
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)scheduler::parse_config(text, "fuzz.toml");
    ++accepted;
  } catch (const error&) {
    ++refused;
  }
  return 0;
}
