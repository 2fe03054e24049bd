#include "scheduler/runtime/launch.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace gradwire::scheduler {
namespace {

/// A loopback socket listening on a free port, kept open and handed to rank
/// 0 for its rendezvous: no other process can take the port meanwhile (a
/// port only probed and closed again could be, and rank 0 failed to bind).
std::pair<int, int> rendezvous_listener() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  check(fd >= 0, std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 128) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (!ok)
    ::close(fd);
  check(ok, std::string("no free loopback port: ") + std::strerror(errno));
  return {fd, ntohs(a.sin_port)};
}

/// The program the ranks run: this one, or GRADWIRE_EXE where this process
/// is not gradwire itself (the Python module's interpreter).
std::string self_exe() {
  if (const char* exe = std::getenv("GRADWIRE_EXE"); exe != nullptr && *exe != '\0')
    return exe;
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

namespace {

/// The last SIGINT or SIGTERM the launcher received, to forward (0: none).
std::atomic<int> forward_signal{0};
extern "C" void on_launcher_signal(int sig) { forward_signal = sig; }

/// Rank `r`'s process: its environment, its own process group (a
/// terminal's Ctrl-C reaches the launcher, which forwards it once), and
/// SIGTERM when the launcher dies, however it dies: no orphans.
[[noreturn]] void exec_rank(int r, int n, const std::string& exe, const std::vector<std::string>& args,
                            const std::string& rendezvous, const std::string& token, pid_t launcher, int deaths_fd,
                            int listener, bool replacing) {
  ::setpgid(0, 0);
  if (replacing) // a new process for a lost rank: it asks rank 0 to be let in (train.restarts)
    ::setenv("GRADWIRE_REJOIN", "1", 1);
  if (r == 0) { // rank 0 serves the rendezvous on the launcher's listening socket
    ::fcntl(listener, F_SETFD, 0);
    ::setenv("GRADWIRE_RENDEZVOUS_FD", std::to_string(listener).c_str(), 1);
  }
  if (r == 0 && deaths_fd >= 0) { // rank 0 hears from the launcher of a rank's death at once
    ::fcntl(deaths_fd, F_SETFD, 0);
    ::setenv("GRADWIRE_LAUNCHER_FD", std::to_string(deaths_fd).c_str(), 1);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != launcher) // the launcher died before the line above
    std::_Exit(143);
  ::setenv("GRADWIRE_RANK", std::to_string(r).c_str(), 1);
  ::setenv("GRADWIRE_SIZE", std::to_string(n).c_str(), 1);
  ::setenv("GRADWIRE_RENDEZVOUS", rendezvous.c_str(), 1);
  ::setenv("GRADWIRE_TOKEN", token.c_str(), 1);
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
  log::warn("cannot start rank {} ({}): {}", r, exe, std::strerror(errno));
  std::_Exit(127);
}

int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

} // namespace

namespace {

/// The launcher's signal handlers while its job runs: SIGINT and SIGTERM
/// are forwarded to every rank once each; SIGPIPE is ignored (rank 0 gone:
/// a write to it fails, and the launcher goes on). The caller's come back
/// at the end.
struct launcher_signals {
  struct sigaction old_int {}, old_term {}, old_pipe {};
  launcher_signals() {
    struct sigaction sa {};
    sa.sa_handler = on_launcher_signal; // no SA_RESTART: waitpid returns to forward it
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int);
    ::sigaction(SIGTERM, &sa, &old_term);
    struct sigaction no_pipe {};
    no_pipe.sa_handler = SIG_IGN;
    ::sigemptyset(&no_pipe.sa_mask);
    ::sigaction(SIGPIPE, &no_pipe, &old_pipe);
  }
  launcher_signals(const launcher_signals&) = delete;
  launcher_signals& operator=(const launcher_signals&) = delete;
  /// The caller's handlers again; a caller that handles the signal (a
  /// sweep stopping after this point) hears of the one forwarded.
  void restore(int forwarded) {
    ::sigaction(SIGPIPE, &old_pipe, nullptr);
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    const auto& old = forwarded == SIGINT ? old_int : old_term;
    if (forwarded != 0 && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)
      ::raise(forwarded);
  }
};

/// A job of local processes, one a rank. The job decides what a rank's
/// death means (a sync job fails naming it, an async parameter server
/// carries on): only rank 0's end, or a signal, ends the others, after a
/// grace period to leave on their own.
struct local_job {
  local_job(int ranks, std::string program, std::string address, std::string job_token,
            const std::vector<std::string>& arguments, int restarts_left)
      : n(ranks), exe(std::move(program)), rendezvous(std::move(address)), token(std::move(job_token)),
        args(arguments), restarts(restarts_left) {}
  int n = 0;
  std::string exe, rendezvous, token;
  const std::vector<std::string>& args;
  int restarts = 0;
  pid_t launcher = ::getpid();
  /// A pipe to rank 0: the launcher sees a rank die at once (waitpid) and
  /// tells rank 0, which need not wait for the liveness bound to notice.
  int deaths[2] = {-1, -1};
  std::vector<pid_t> pids;
  int rank0_code = -1, first_failure = 0, alive = 0, forwarded = 0;
  bool ending = false;
  std::chrono::steady_clock::time_point term_at{}, kill_at{};

  void start(int listener) {
    if (::pipe2(deaths, O_CLOEXEC) != 0)
      deaths[0] = deaths[1] = -1;
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      check(pid >= 0, std::string("fork: ") + std::strerror(errno));
      if (pid == 0)
        exec_rank(r, n, exe, args, rendezvous, token, launcher, deaths[0], listener, false);
      pids.push_back(pid);
    }
    alive = n;
    if (deaths[0] >= 0)
      ::close(deaths[0]);
    ::close(listener); // rank 0 has it
  }

  void signal_all(int sig) const {
    for (pid_t p : pids)
      if (p > 0)
        ::kill(p, sig);
  }

  /// Rank `rank` ended with status `st`.
  void exited(int rank, int st) {
    const int code = exit_code(st);
    if (code != 0 && first_failure == 0)
      first_failure = code;
    if (rank == 0) {
      rank0_code = code;
      ending = true; // the others follow rank 0 (they stop once it is gone); make sure they do
      term_at = std::chrono::steady_clock::now() + std::chrono::seconds(code == 0 ? 30 : 5);
      kill_at = term_at + std::chrono::seconds(5);
      return;
    }
    if (code == 0 || forwarded != 0)
      return;
    const bool by_exit = WIFEXITED(st);
    const int what = by_exit ? code : WTERMSIG(st);
    log::warn("rank {} {} {}; rank 0 decides whether the job goes on", rank,
              by_exit ? "exited with status" : "was killed by signal", what);
    if (deaths[1] >= 0) {
      const auto line = std::to_string(rank) + (by_exit ? " exited with status " : " was killed by signal ") +
                        std::to_string(what) + "\n";
      [[maybe_unused]] const auto w = ::write(deaths[1], line.data(), line.size()); // rank 0 gone: nothing to tell
    }
    if (restarts > 0 && !ending)
      restart(rank);
  }

  /// A new process for a lost rank, which asks rank 0 to be let in.
  void restart(int rank) {
    --restarts;
    log::info("starting rank {} again ({} restart(s) left)", rank, restarts);
    const pid_t again = ::fork();
    if (again == 0)
      exec_rank(rank, n, exe, args, rendezvous, token, launcher, -1, -1, true);
    if (again > 0) {
      pids[static_cast<std::size_t>(rank)] = again;
      ++alive;
    }
  }

  /// Rank 0 has ended: the others get SIGTERM after the grace period, then SIGKILL.
  void hurry() {
    const auto now = std::chrono::steady_clock::now();
    if (now > kill_at)
      signal_all(SIGKILL);
    else if (now > term_at) {
      signal_all(SIGTERM);
      term_at = kill_at;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  /// Until every rank has ended.
  void wait() {
    while (alive > 0) {
      int st = 0;
      const pid_t pid = ::waitpid(-1, &st, ending ? WNOHANG : 0);
      if (pid > 0) {
        --alive;
        const auto it = std::find(pids.begin(), pids.end(), pid);
        const int rank = it == pids.end() ? 0 : static_cast<int>(it - pids.begin());
        if (it != pids.end())
          *it = -1;
        exited(rank, st);
        continue;
      }
      if (pid < 0 && errno != EINTR)
        break;
      if (const int sig = forward_signal.exchange(0)) {
        signal_all(sig); // once per signal received, to every rank
        forwarded = sig;
        continue;
      }
      if (ending)
        hurry();
    }
    if (deaths[1] >= 0)
      ::close(deaths[1]);
  }
};

} // namespace

int launch_local(int n, const std::vector<std::string>& args, int restarts) {
  check(n >= 1 && n <= 256, "--procs " + std::to_string(n) + ": choose 1..256 processes");
  const auto [listener, port] = rendezvous_listener();
  const char* tok = std::getenv("GRADWIRE_TOKEN");
  local_job job(n, self_exe(), "127.0.0.1:" + std::to_string(port), tok && *tok ? tok : fresh_token(), args, restarts);
  launcher_signals signals;
  // Every rank of this job (restarted ones too) names it alike: the run id
  // of what it writes (scheduler/app/run_id.hpp) is the same on each.
  const char* outer = std::getenv("GRADWIRE_JOB_ID");
  const std::string saved = outer != nullptr ? outer : "";
  ::setenv("GRADWIRE_JOB_ID", fresh_token().substr(0, 16).c_str(), 1);
  job.start(listener);
  job.wait();
  if (outer != nullptr)
    ::setenv("GRADWIRE_JOB_ID", saved.c_str(), 1);
  else
    ::unsetenv("GRADWIRE_JOB_ID");
  signals.restore(job.forwarded);
  // The job's outcome is rank 0's, which writes the results.
  return job.rank0_code >= 0 ? job.rank0_code : job.first_failure;
}

} // namespace gradwire::scheduler
