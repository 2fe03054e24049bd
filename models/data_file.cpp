#include "models/data_file.hpp"

#include "kernels/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gradwire::models {
namespace {

std::string kind_of(mode_t m) {
  if (S_ISFIFO(m))
    return "a FIFO (named pipe)";
  if (S_ISSOCK(m))
    return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m))
    return "a device";
  if (S_ISDIR(m))
    return "a folder";
  return "not a regular file";
}

} // namespace

std::string not_a_data_file(const std::string& path, bool folder_ok) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ELOOP)
      return "is a loop of symbolic links";
    if (errno == ENOENT || errno == ENOTDIR)
      return "does not exist";
    return std::string("cannot be read (") + std::strerror(errno) + ")";
  }
  if (S_ISREG(st.st_mode) || (folder_ok && S_ISDIR(st.st_mode)))
    return "";
  return "is " + kind_of(st.st_mode) + ": data is read from regular files (or a folder of them)";
}

void check_data_file(const std::string& path, const std::string& what) {
  const auto why = not_a_data_file(path);
  check(why.empty(), what + ": " + path + " " + why);
}

std::string read_data_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: should the path become a FIFO after the check, open() still returns.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  check(fd >= 0, what + ": cannot open " + path + " (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw error(what + ": " + path + " is " + kind_of(st.st_mode) + ": data is read from regular files");
  }
  std::string out;
  out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw error(what + ": error while reading " + path + " after " + std::to_string(out.size()) + " bytes (" +
                  std::strerror(e) + ")");
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

} // namespace gradwire::models
