#include "transport/ucx_setup.hpp"

#include "kernels/error.hpp"

#include <fcntl.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <iterator>
#include <mutex>

namespace gradwire::transport::ucx_setup {

namespace {
constexpr std::uint64_t address_magic = 0x4757414444523031ull; // "GWADDR01"

void put_field(std::vector<std::uint8_t>& out, const void* p, std::uint32_t n) {
  const std::size_t at = out.size();
  out.resize(at + 4 + n);
  std::memcpy(out.data() + at, &n, 4);
  if (n)
    std::memcpy(out.data() + at + 4, p, n);
}

/// Sets (or clears) the FIFO element size variables for `opts`; called
/// with the environment lock held until the worker exists.
void set_fifo_environment(const ucx_options& opts) {
  static const std::pair<const char*, const char*> fifo_vars[] = {{"posix", "UCX_POSIX_FIFO_ELEM_SIZE"},
                                                                   {"sysv", "UCX_SYSV_FIFO_ELEM_SIZE"}};
  // A user's own setting, found at the first link, wins.
  static const bool user_set = std::any_of(std::begin(fifo_vars), std::end(fifo_vars),
                                           [](const auto& tv) { return std::getenv(tv.second) != nullptr; });
  if (user_set)
    return;
  const std::string tls = effective_tls(opts);
  // Only for the transports the TLS opens: a variable no transport reads draws UCX's warning.
  for (const auto& [tl, var] : fifo_vars) {
    if (opts.fifo_elem_bytes > 0 && tls_includes(tls, tl))
      ::setenv(var, std::to_string(opts.fifo_elem_bytes).c_str(), 1);
    else
      ::unsetenv(var);
  }
}
} // namespace

void check_status(ucs_status_t st, const char* what) {
  if (st != UCS_OK)
    throw error(std::string("UCX: ") + what + ": " + ucs_status_string(st));
}

std::string open(const ucx_options& opts, ucp_context_h& context, ucp_worker_h& worker, std::uint64_t features) {
  static std::mutex env_mu; // links made at once each get their own FIFO setting
  std::lock_guard<std::mutex> env_lk(env_mu);
  set_fifo_environment(opts);
  std::string fifo;
  for (const char* var : {"UCX_POSIX_FIFO_ELEM_SIZE", "UCX_SYSV_FIFO_ELEM_SIZE"})
    if (const char* v = std::getenv(var))
      fifo += (fifo.empty() ? "" : " ") + std::string(var) + "=" + v;
  ucp_config_t* config = nullptr;
  check_status(ucp_config_read(nullptr, nullptr, &config), "reading the configuration");
  if (!opts.tls.empty()) {
    auto st = ucp_config_modify(config, "TLS", opts.tls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      check_status(st, ("setting TLS=" + opts.tls).c_str());
    }
  }
  for (const auto& [name, value] : opts.ucx_config) {
    if (std::getenv(("UCX_" + name).c_str()) != nullptr)
      continue;
    auto st = ucp_config_modify(config, name.c_str(), value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      check_status(st, ("setting " + name + "=" + value).c_str());
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = features;
  params.mt_workers_shared = 0;
  auto st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  check_status(st, "initialising the context");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE; // one thread at a time, behind the link's lock
  check_status(ucp_worker_create(context, &wp, &worker), "creating the worker");
  restrict_sysv_segments();
  return fifo;
}

int restrict_sysv_segments() {
  std::ifstream table("/proc/sysvipc/shm");
  std::string line;
  std::getline(table, line); // the header
  int changed = 0;
  const auto me = ::getpid();
  while (std::getline(table, line)) {
    std::istringstream in(line);
    long long key = 0, id = 0, size = 0, cpid = 0;
    unsigned perms = 0;
    if (!(in >> key >> id >> std::oct >> perms >> std::dec >> size >> cpid) || cpid != me || (perms & 077) == 0)
      continue;
    shmid_ds ds{};
    if (::shmctl(static_cast<int>(id), IPC_STAT, &ds) != 0)
      continue;
    ds.shm_perm.mode = (ds.shm_perm.mode & ~0777u) | 0600u; // the ranks of a job are one user
    if (::shmctl(static_cast<int>(id), IPC_SET, &ds) == 0)
      ++changed;
  }
  return changed;
}

bool tls_includes(const std::string& tls, const std::string& tl) {
  const bool negate = !tls.empty() && tls[0] == '^';
  bool listed = false;
  std::size_t at = negate ? 1 : 0;
  while (at <= tls.size()) {
    const auto comma = std::min(tls.find(',', at), tls.size());
    const auto item = tls.substr(at, comma - at);
    listed = listed || item == tl || item == "sm" || item == "shm" || item == "mm" || (!negate && item == "all");
    at = comma + 1;
  }
  return negate ? !listed : listed;
}

std::string effective_tls(const ucx_options& opts) {
  const char* env_tls = std::getenv("UCX_TLS");
  return !opts.tls.empty() ? opts.tls : env_tls != nullptr ? env_tls : "all";
}

bool tls_tcp_only(const std::string& tls) {
  if (tls.empty() || tls[0] == '^')
    return false;
  bool tcp = false;
  std::size_t at = 0;
  while (at <= tls.size()) {
    const auto comma = std::min(tls.find(',', at), tls.size());
    const auto item = tls.substr(at, comma - at);
    if (item == "tcp")
      tcp = true;
    else if (item != "self" && item != "sockcm" && item != "tcp_sockcm")
      return false;
    at = comma + 1;
  }
  return tcp;
}

std::vector<std::pair<std::string, std::string>> tcp_only_config() {
  return {{"RNDV_THRESH", "512k"}};
}

std::vector<std::uint8_t> pack(const address& a) {
  std::vector<std::uint8_t> out(8);
  std::memcpy(out.data(), &address_magic, 8);
  put_field(out, a.ucx.data(), static_cast<std::uint32_t>(a.ucx.size()));
  put_field(out, a.host.data(), static_cast<std::uint32_t>(a.host.size()));
  put_field(out, a.fifo.data(), static_cast<std::uint32_t>(a.fifo.size()));
  if (!a.collective.empty())
    put_field(out, a.collective.data(), static_cast<std::uint32_t>(a.collective.size()));
  return out;
}

address unpack(const std::vector<std::uint8_t>& in, int rank) {
  std::size_t at = 0;
  auto take = [&](void* dst, std::size_t n) {
    check(at + n <= in.size(), "rendezvous: rank " + std::to_string(rank) + "'s address is truncated");
    if (n > 0) // an empty field's data() may be null
      std::memcpy(dst, in.data() + at, n);
    at += n;
  };
  std::uint64_t magic = 0;
  take(&magic, 8);
  check(magic == address_magic, "rendezvous: rank " + std::to_string(rank) + "'s address is not a gradwire address");
  address a;
  auto take_field = [&](auto& dst) {
    std::uint32_t n = 0;
    take(&n, 4);
    check(n <= in.size() - at, "rendezvous: rank " + std::to_string(rank) + "'s address is truncated");
    dst.resize(n);
    take(dst.data(), n);
  };
  take_field(a.ucx);
  take_field(a.host);
  take_field(a.fifo);
  if (at < in.size())
    take_field(a.collective);
  check(at == in.size(), "rendezvous: rank " + std::to_string(rank) + "'s address has " +
                           std::to_string(in.size() - at) + " bytes too many");
  return a;
}

std::string ucx_parse_check(const std::vector<std::uint8_t>& ucx) {
  if (ucx.empty())
    return "an empty UCX address";
  std::fflush(nullptr); // the child exits with _exit: nothing buffered is written twice
  const pid_t child = ::fork();
  if (child < 0)
    return std::string("cannot fork to check it: ") + std::strerror(errno);
  if (child == 0) { // parse, then leave without running any of the parent's destructors
    const int quiet = ::open("/dev/null", O_WRONLY);
    if (quiet >= 0) { // UCX's assertion text and backtrace, and whatever the parent's handlers would print
      ::dup2(quiet, 1);
      ::dup2(quiet, 2);
    }
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) // die of it, whoever installed handlers
      ::signal(sig, SIG_DFL);
    std::vector<std::uint8_t> copy = ucx; // UCX reads past no end of this
    ucp_worker_address_attr_t attr{};
    attr.field_mask = UCP_WORKER_ADDRESS_ATTR_FIELD_UID;
    const auto st = ucp_worker_address_query(reinterpret_cast<ucp_address_t*>(copy.data()), &attr);
    ::_exit(st == UCS_OK ? 0 : 1);
  }
  int status = 0;
  for (int waited_ms = 0;; waited_ms += 5) {
    const pid_t got = ::waitpid(child, &status, WNOHANG);
    if (got == child)
      break;
    if (got < 0)
      return std::string("cannot check it: ") + std::strerror(errno);
    if (waited_ms >= 10000) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return "UCX did not finish parsing it in 10 s";
    }
    ::usleep(5000);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return "";
  if (WIFSIGNALED(status))
    return std::string("UCX cannot parse it (its parser died of ") + ::strsignal(WTERMSIG(status)) + ")";
  return "UCX cannot parse it";
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string host_identity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ipc[128] = {};
  const auto n = ::readlink("/proc/self/ns/ipc", ipc, sizeof ipc - 1);
  return host_name() + " boot " + (boot.empty() ? "?" : boot) + " " + (n > 0 ? std::string(ipc, static_cast<std::size_t>(n)) : "ipc:?");
}

} // namespace gradwire::transport::ucx_setup
