#pragma once
/// @file varint.hpp
/// The variable-length integers of gradwire's record files
/// (update_record.hpp, mix_record.hpp): LEB128 varints, zigzag for signed
/// deltas, and a reader that says where the data ends inside a number.

#include "kernels/error.hpp"

#include <cstdint>
#include <string>

namespace gradwire::actors::varint {

inline void put(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

inline std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
inline std::int64_t unzigzag(std::uint64_t v) {
  return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}

/// The little-endian u32 at `at` of `d` (the caller checked the length).
inline std::uint32_t u32_at(const std::string& d, std::size_t at) {
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i)
    n |= static_cast<std::uint32_t>(static_cast<unsigned char>(d[at + static_cast<std::size_t>(i)])) << (8 * i);
  return n;
}

/// Reads varints from `data` from `pos` on; `path` names it in errors.
class reader {
public:
  reader(const std::string& data, std::size_t pos, const std::string& path) : d_(data), pos_(pos), path_(path) {}
  bool at_end() const { return pos_ >= d_.size(); }
  std::size_t pos() const { return pos_; }
  /// The next varint; false when the data ends inside it.
  bool next(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= d_.size())
        return false;
      const auto b = static_cast<unsigned char>(d_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0)
        return true;
    }
    throw error(path_ + ": malformed record (a number of more than 64 bits at byte " + std::to_string(pos_) + ")");
  }

private:
  const std::string& d_;
  std::size_t pos_;
  const std::string& path_;
};

} // namespace gradwire::actors::varint
