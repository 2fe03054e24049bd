#include "scheduler/runtime/launch.hpp"

#include "kernels/error.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace gradwire::scheduler {
namespace {

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  check(fd >= 0, std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  check(ok, std::string("no free loopback port: ") + std::strerror(errno));
  return ntohs(a.sin_port);
}

std::string self_exe() {
  std::vector<char> buf(4096);
  const auto n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  check(n > 0, "cannot find this program's path (/proc/self/exe)");
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

} // namespace

std::string fresh_token() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char b[16] = {};
  in.read(reinterpret_cast<char*>(b), sizeof b);
  std::string out;
  char hex[3];
  for (unsigned char c : b) {
    std::snprintf(hex, sizeof hex, "%02x", c);
    out += hex;
  }
  return out;
}

int launch_local(int n, const std::vector<std::string>& args) {
  check(n >= 1 && n <= 256, "--procs " + std::to_string(n) + ": choose 1..256 processes");
  const std::string exe = self_exe();
  const std::string rendezvous = "127.0.0.1:" + std::to_string(free_port());
  const char* tok = std::getenv("GRADWIRE_TOKEN");
  const std::string token = tok && *tok ? tok : fresh_token();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    check(pid >= 0, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::setenv("GRADWIRE_RANK", std::to_string(r).c_str(), 1);
      ::setenv("GRADWIRE_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("GRADWIRE_RENDEZVOUS", rendezvous.c_str(), 1);
      ::setenv("GRADWIRE_TOKEN", token.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(exe.c_str())};
      for (const auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "gradwire: cannot start rank %d (%s): %s\n", r, exe.c_str(), std::strerror(errno));
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  int status_out = 0, alive = n;
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at{};
  while (alive > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, stopping ? WNOHANG : 0);
    if (pid > 0) {
      --alive;
      int rank = 0;
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (pids[i] == pid) {
          rank = static_cast<int>(i);
          pids[i] = -1;
        }
      const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (code != 0 && !stopping) {
        std::fprintf(stderr, "gradwire: rank %d %s %d; stopping the other ranks\n", rank,
                     WIFEXITED(st) ? "exited with status" : "was killed by signal",
                     WIFEXITED(st) ? code : WTERMSIG(st));
        status_out = code;
        stopping = true;
        kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        for (pid_t p : pids)
          if (p > 0)
            ::kill(p, SIGTERM);
      }
      continue;
    }
    if (pid < 0 && errno != EINTR)
      break;
    if (stopping) {
      if (std::chrono::steady_clock::now() > kill_at)
        for (pid_t p : pids)
          if (p > 0)
            ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return status_out;
}

} // namespace gradwire::scheduler
