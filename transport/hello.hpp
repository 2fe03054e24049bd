#pragma once
/// @file hello.hpp
/// The rendezvous hello, a joining process's first bytes to rank 0: read
/// from any byte source and judged, apart from the sockets, so that the
/// same code runs under the fuzzer (tests/fuzz/fuzz_hello.cpp).
///
///   u32 magic "GWRV" | u32 n, n token bytes | u32 rank | u32 size | u32 n, n address bytes
///
/// Every length is bounded before anything is allocated.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradwire::transport {

constexpr std::uint32_t hello_magic = 0x56525747; // "GWRV"
constexpr std::uint32_t hello_max_token = 4096, hello_max_address = 1u << 20;

struct hello_fields {
  std::string token;
  std::int32_t rank = -1, size = -1;
  std::vector<std::uint8_t> address;
};

/// Reads exactly n bytes into dst, or throws gradwire::error (timeout, closed).
using byte_reader = std::function<void(void* dst, std::size_t n)>;

/// One u32 (host order, as every rank of a job shares one architecture).
std::uint32_t read_u32(const byte_reader& read);
/// A u32 length, then that many bytes; over `limit` throws, naming `what`.
std::vector<std::uint8_t> read_blob(const byte_reader& read, std::uint32_t limit, const char* what);

/// A whole hello; throws gradwire::error when it is not one.
hello_fields read_hello(const byte_reader& read);

/// What rank 0 knows when a hello arrives.
struct admission {
  const std::string& token; ///< the job's
  int size;                 ///< the job's process count
  const std::vector<bool>& joined; ///< by rank, rank 0 included
  /// Why an address is unusable ("" when it is fine); may be empty.
  const std::function<std::string(const std::vector<std::uint8_t>&)>& check_address;
};

/// Why rank 0 refuses `h` ("" to admit it): a wrong token, another size, a
/// rank out of range or joined already, an address that cannot be used.
std::string refusal(const hello_fields& h, const admission& a);

/// A byte_reader over memory (the fuzzer's, and tests').
byte_reader memory_reader(const std::uint8_t*& at, const std::uint8_t* end);

} // namespace gradwire::transport
