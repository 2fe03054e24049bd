#include "actors/record_file.hpp"
#include "actors/varint.hpp"

#include "kernels/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace gradwire::actors {
namespace {

constexpr std::size_t magic_len = 8;
constexpr std::size_t block_bytes = 4096;
constexpr std::uint32_t max_header = 4096;

} // namespace

record_file::record_file(std::string path, const char* magic, const std::string& header, std::int64_t max_bytes)
    : path_(std::move(path)), max_bytes_(max_bytes) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    error_ = path_ + ": " + std::strerror(errno);
    return;
  }
  buf_.append(magic, magic_len);
  const auto n = static_cast<std::uint32_t>(header.size());
  for (int i = 0; i < 4; ++i)
    buf_.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  buf_ += header;
  flush();
}

record_file::~record_file() {
  flush();
  if (fd_ >= 0)
    ::close(fd_);
}

void record_file::fail(const std::string& why) {
  if (error_.empty())
    error_ = path_ + ": " + why;
  buf_.clear();
}

bool record_file::append(const std::string& entry, bool now) {
  if (!open())
    return false;
  if (max_bytes_ > 0 && bytes_ + static_cast<std::int64_t>(buf_.size() + entry.size()) > max_bytes_) {
    capped_ = true; // the bound: the record ends at its last whole entry
    flush();
    return false;
  }
  buf_ += entry;
  if (now || buf_.size() >= block_bytes)
    flush();
  return true;
}

void record_file::flush() {
  if (fd_ < 0 || buf_.empty() || !error_.empty())
    return;
  std::size_t done = 0;
  while (done < buf_.size()) {
    const auto n = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      fail(n < 0 ? std::strerror(errno) : "the disk took no bytes");
      return;
    }
    done += static_cast<std::size_t>(n);
  }
  bytes_ += static_cast<std::int64_t>(buf_.size());
  buf_.clear();
}

std::string record_header_text(const std::string& data, const char* magic, const std::string& path,
                               const std::string& what, std::size_t& body) {
  check(data.size() >= magic_len + 4 && data.compare(0, magic_len, magic) == 0,
        path + ": not a " + what + " (no " + std::string(magic, magic_len) + " header)");
  const std::uint32_t n = varint::u32_at(data, magic_len);
  check(n <= max_header && magic_len + 4 + n <= data.size(),
        path + ": malformed record header (length " + std::to_string(n) + ")");
  body = magic_len + 4 + n;
  return data.substr(magic_len + 4, n);
}

void for_each_header_line(const std::string& text,
                          const std::function<void(const std::string&, const std::string&)>& f) {
  std::size_t at = 0;
  while (at < text.size()) {
    auto end = text.find('\n', at);
    if (end == std::string::npos)
      end = text.size();
    const auto line = text.substr(at, end - at);
    at = end + 1;
    const auto space = line.find(' ');
    if (space != std::string::npos && space > 0 && space + 1 < line.size())
      f(line.substr(0, space), line.substr(space + 1));
  }
}

bool header_integer(const std::string& value, std::int64_t& v) {
  if (value.empty())
    return false;
  std::size_t i = value[0] == '-' ? 1 : 0;
  if (i == value.size() || value.size() > 20)
    return false;
  std::int64_t x = 0;
  for (; i < value.size(); ++i) {
    if (value[i] < '0' || value[i] > '9' || x > (INT64_MAX - 9) / 10)
      return false;
    x = x * 10 + (value[i] - '0');
  }
  v = value[0] == '-' ? -x : x;
  return true;
}

} // namespace gradwire::actors
