#pragma once
// Standard error captured into a file while a test needs it: what the log
// wrote, read back as text.
#include "temp_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace gwtest {

/// Standard error into a file while it lives; text() reads what was written.
class stderr_capture {
public:
  explicit stderr_capture(const std::string& name) : path_(fresh_dir(name, true) + "/stderr.txt") {
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~stderr_capture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

private:
  void restore() {
    if (saved_ >= 0) {
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
  }
  std::string path_;
  int saved_ = -1;
};

} // namespace gwtest
