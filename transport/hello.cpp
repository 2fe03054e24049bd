#include "transport/hello.hpp"

#include "kernels/error.hpp"

#include <cstring>

namespace gradwire::transport {

std::uint32_t read_u32(const byte_reader& read) {
  std::uint32_t v = 0;
  read(&v, 4);
  return v;
}

std::vector<std::uint8_t> read_blob(const byte_reader& read, std::uint32_t limit, const char* what) {
  const auto n = read_u32(read);
  if (n > limit)
    throw error(std::string(what) + " of " + std::to_string(n) + " bytes is over the limit of " +
                std::to_string(limit));
  std::vector<std::uint8_t> out(n);
  if (n > 0)
    read(out.data(), n);
  return out;
}

hello_fields read_hello(const byte_reader& read) {
  if (read_u32(read) != hello_magic)
    throw error("not a gradwire rendezvous message");
  hello_fields h;
  const auto tok = read_blob(read, hello_max_token, "token");
  h.token.assign(tok.begin(), tok.end());
  h.rank = static_cast<std::int32_t>(read_u32(read));
  h.size = static_cast<std::int32_t>(read_u32(read));
  h.address = read_blob(read, hello_max_address, "address");
  return h;
}

std::string refusal(const hello_fields& h, const admission& a) {
  const auto rank = std::to_string(h.rank);
  if (h.token != a.token)
    return "wrong job token (rank " + rank + ")";
  if (h.size != a.size)
    return "rank " + rank + " was started for " + std::to_string(h.size) + " processes, rank 0 for " +
           std::to_string(a.size);
  if (h.rank <= 0 || h.rank >= a.size)
    return "rank " + rank + " is out of range 1.." + std::to_string(a.size - 1);
  if (static_cast<std::size_t>(h.rank) < a.joined.size() && a.joined[static_cast<std::size_t>(h.rank)])
    return "rank " + rank + " joined twice";
  if (a.check_address)
    if (auto why = a.check_address(h.address); !why.empty())
      return "rank " + rank + "'s address: " + why;
  return "";
}

byte_reader memory_reader(const std::uint8_t*& at, const std::uint8_t* end) {
  return [&at, end](void* dst, std::size_t n) {
    if (static_cast<std::size_t>(end - at) < n)
      throw error("connection closed");
    std::memcpy(dst, at, n);
    at += n;
  };
}

} // namespace gradwire::transport
