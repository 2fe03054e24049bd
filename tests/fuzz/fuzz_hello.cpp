// Fuzz target: the rendezvous hello, as rank 0 reads and judges each
// joining process's first bytes: read_hello, then refusal() with the
// address envelope unpacked as connect() would (ucx_setup::unpack).
// UCX's own parser is not run here: it runs in a child process at the
// rendezvous (ucx_setup::ucx_parse_check, tested in test_ucx_node).
#include "fuzz_target.hpp"
#include "kernels/error.hpp"
#include "transport/hello.hpp"
#include "transport/ucx_setup.hpp"

using namespace gradwire;
using namespace gradwire::transport;

namespace {

std::vector<std::uint8_t> hello_bytes(const std::string& token, std::uint32_t rank, std::uint32_t size,
                                      const std::vector<std::uint8_t>& address) {
  std::vector<std::uint8_t> out;
  gwfuzz::put_u32(out, hello_magic);
  gwfuzz::put_u32(out, static_cast<std::uint32_t>(token.size()));
  out.insert(out.end(), token.begin(), token.end());
  gwfuzz::put_u32(out, rank);
  gwfuzz::put_u32(out, size);
  gwfuzz::put_u32(out, static_cast<std::uint32_t>(address.size()));
  out.insert(out.end(), address.begin(), address.end());
  return out;
}

std::vector<std::uint8_t> address(const std::string& host, const std::string& fifo) {
  ucx_setup::address a;
  a.ucx = {1, 2, 3, 4, 5, 6, 7, 8};
  a.host = host;
  a.fifo = fifo;
  return ucx_setup::pack(a);
}

} // namespace

namespace {
std::int64_t admitted = 0, refused = 0, unread = 0;
}

namespace gwfuzz {
depth reached() {
  return {std::to_string(admitted) + " admitted, " + std::to_string(refused) + " refused, " + std::to_string(unread) +
            " not hellos",
          admitted > 0 && refused > 0};
}
std::vector<std::vector<std::uint8_t>> seeds() {
  return {hello_bytes("fuzz", 1, 4, address("node1", "posix=512 sysv=512")),
          hello_bytes("fuzz", 3, 4, address("", "")), hello_bytes("", 2, 4, address("node2", "")),
          hello_bytes("fuzz", 0, 4, {})};
}
} // namespace gwfuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string token = "fuzz";
  static const std::vector<bool> joined = {true, false, true, false};
  static const std::function<std::string(const std::vector<std::uint8_t>&)> check =
    [](const std::vector<std::uint8_t>& blob) -> std::string {
    try {
      auto a = ucx_setup::unpack(blob, -1);
      return a.ucx.empty() ? "an empty UCX address" : "";
    } catch (const error& e) {
      return e.what();
    }
  };
  const std::uint8_t* at = data;
  try {
    const auto h = read_hello(memory_reader(at, data + size));
    if (refusal(h, admission{token, 4, joined, check}).empty())
      ++admitted;
    else
      ++refused;
  } catch (const error&) { // not a hello: the connection is dropped
    ++unread;
  }
  return 0;
}
