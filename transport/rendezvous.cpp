#include "transport/rendezvous.hpp"
#include "kernels/stop_request.hpp"
#include "kernels/log.hpp"

#include "transport/hello.hpp"

#include "kernels/error.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gradwire::transport {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::uint32_t max_token = hello_max_token, max_blob = hello_max_address;

/// A socket closed on scope exit.
class socket_fd {
public:
  explicit socket_fd(int fd = -1) : fd_(fd) {}
  ~socket_fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  socket_fd(socket_fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  socket_fd& operator=(socket_fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

private:
  int fd_;
};

int ms_left(clock_type::time_point until) {
  return static_cast<int>(std::max<long long>(
    0, std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count()));
}

void io_all(int fd, void* buf, std::size_t n, bool writing, clock_type::time_point until) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    pollfd pfd{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, ms_left(until)) <= 0)
      throw error("timed out");
    const auto k = writing ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k <= 0)
      throw error(k == 0 ? "connection closed" : std::strerror(errno));
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

struct buffer {
  std::vector<std::uint8_t> bytes;
  void u32(std::uint32_t v) { put(&v, 4); }
  void blob(const void* p, std::size_t n) {
    u32(static_cast<std::uint32_t>(n));
    put(p, n);
  }
  void put(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
};

byte_reader socket_reader(int fd, clock_type::time_point until) {
  return [fd, until](void* dst, std::size_t n) { io_all(fd, dst, n, false, until); };
}

addrinfo* resolve(const rendezvous_options& o, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const auto port = std::to_string(o.port);
  if (int rc = ::getaddrinfo(o.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw error("rendezvous host '" + o.host + "': " + ::gai_strerror(rc));
  return res;
}

std::string where(const rendezvous_options& o) { return o.host + ":" + std::to_string(o.port); }

/// A joining process's hello, read by a handshake thread of its own.
struct hello : hello_fields {
  socket_fd conn;
  std::string ip, failure; ///< failure: why the hello could not be read
};

/// The hellos of joining processes, each read on its own thread with its
/// own deadline, so a silent or slow connection holds up no one else.
class handshakes {
public:
  static constexpr int max_open = 64; ///< more at once are closed unread
  ~handshakes() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (int fd : open_fds_)
        ::shutdown(fd, SHUT_RDWR); // wakes their threads: the rendezvous is over
    }
    for (auto& t : threads_)
      t.second.join();
  }
  void start(socket_fd c, std::string ip, clock_type::time_point until) {
    std::lock_guard<std::mutex> lk(mu_);
    if (static_cast<int>(open_fds_.size()) >= max_open) {
      log::warn("rendezvous: dropped a connection from {}: {} handshakes already open", ip, max_open);
      return;
    }
    open_fds_.push_back(c.get());
    auto finished = std::make_shared<std::atomic<bool>>(false);
    threads_.emplace_back(finished, std::thread([this, finished, conn = std::move(c), ip = std::move(ip), until]() mutable {
      hello h;
      h.ip = std::move(ip);
      try {
        const auto step = std::min(until, clock_type::now() + std::chrono::seconds(5)); // per connection
        static_cast<hello_fields&>(h) = read_hello(socket_reader(conn.get(), step));
      } catch (const error& e) {
        h.failure = e.what();
      }
      std::lock_guard<std::mutex> lk2(mu_);
      open_fds_.erase(std::find(open_fds_.begin(), open_fds_.end(), conn.get()));
      h.conn = std::move(conn);
      done_.push_back(std::move(h));
      *finished = true;
    }));
  }
  /// The hellos read so far (and the threads that read them, joined).
  std::vector<hello> take() {
    std::vector<hello> out;
    std::vector<std::thread> over;
    {
      std::lock_guard<std::mutex> lk(mu_);
      out.swap(done_);
      for (auto it = threads_.begin(); it != threads_.end();)
        if (*it->first) {
          over.push_back(std::move(it->second));
          it = threads_.erase(it);
        } else
          ++it;
    }
    for (auto& t : over)
      t.join();
    return out;
  }

private:
  std::mutex mu_;
  std::vector<int> open_fds_;
  std::vector<hello> done_;
  std::vector<std::pair<std::shared_ptr<std::atomic<bool>>, std::thread>> threads_;
};

/// Waits up to `wait_ms` for a connection on `listener`; one that comes
/// has its hello read on a handshake thread of its own, until `until`.
void accept_one(int listener, int wait_ms, handshakes& hs, clock_type::time_point until) {
  pollfd pfd{listener, POLLIN, 0};
  if (::poll(&pfd, 1, wait_ms) <= 0)
    return;
  sockaddr_in peer{};
  socklen_t plen = sizeof peer;
  socket_fd c(::accept(listener, reinterpret_cast<sockaddr*>(&peer), &plen));
  if (c.get() < 0)
    return;
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
  hs.start(std::move(c), ip, until);
}

void dropped(const hello& h) {
  log::warn("rendezvous: dropped a connection from {}: {}", h.ip, h.failure);
}

void refuse(hello& h, const std::string& why) {
  log::warn("rendezvous: refused a process from {}: {}", h.ip, why);
  buffer b;
  b.u32(1);
  b.blob(why.data(), why.size());
  try {
    io_all(h.conn.get(), b.bytes.data(), b.bytes.size(), true, clock_type::now() + std::chrono::seconds(1));
  } catch (const error&) {
  }
}

/// The listening socket the launcher made for this job's rendezvous and
/// handed down (GRADWIRE_RENDEZVOUS_FD, rank 0 of `gradwire --procs`): no
/// other process can take its port between the launcher's choice and this
/// bind. Taken once; -1 if there is none, or it is not a socket listening
/// on the rendezvous port.
int inherited_listener(const rendezvous_options& o) {
  const char* v = std::getenv("GRADWIRE_RENDEZVOUS_FD");
  if (!v || !*v)
    return -1;
  const int fd = std::atoi(v);
  ::unsetenv("GRADWIRE_RENDEZVOUS_FD");
  int listening = 0;
  socklen_t len = sizeof listening;
  sockaddr_in a{};
  socklen_t alen = sizeof a;
  if (fd < 3 || ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen) != 0 || a.sin_family != AF_INET ||
      ntohs(a.sin_port) != o.port)
    return -1;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

socket_fd listen_on(const rendezvous_options& o) {
  if (const int fd = inherited_listener(o); fd >= 0)
    return socket_fd(fd);
  auto* ai = resolve(o, true);
  socket_fd ls(::socket(ai->ai_family, SOCK_STREAM, 0));
  int one = 1;
  ::setsockopt(ls.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const int rc = ::bind(ls.get(), ai->ai_addr, ai->ai_addrlen);
  ::freeaddrinfo(ai);
  if (rc != 0 || ::listen(ls.get(), 128) != 0)
    throw error("rank 0 cannot listen for the rendezvous on " + where(o) + ": " + std::strerror(errno) +
                " (choose another port with --rendezvous HOST:PORT or MASTER_PORT)");
  return ls;
}

/// Rank 0's answer to an admitted hello: 0, then every rank's address.
buffer table_reply(const std::vector<std::vector<std::uint8_t>>& table) {
  buffer reply;
  reply.u32(0);
  for (const auto& blob : table)
    reply.blob(blob.data(), blob.size());
  return reply;
}

std::vector<std::vector<std::uint8_t>> serve(int size, const rendezvous_options& o,
                                             const std::vector<std::uint8_t>& mine) {
  auto ls = listen_on(o);
  std::vector<std::vector<std::uint8_t>> table(static_cast<std::size_t>(size));
  std::vector<bool> have(static_cast<std::size_t>(size), false);
  std::vector<socket_fd> conns(static_cast<std::size_t>(size));
  table[0] = mine;
  have[0] = true;
  int missing = size - 1;
  const auto until = clock_type::now() + std::chrono::milliseconds(o.timeout_ms);
  handshakes hs;
  while (missing > 0) {
    const bool stopped = kernels::stop_requested();
    if (stopped || clock_type::now() >= until) {
      std::string names;
      for (int r = 0; r < size; ++r)
        if (!have[static_cast<std::size_t>(r)])
          names += (names.empty() ? "" : ", ") + std::to_string(r);
      const auto what = " waiting for rank(s) " + names + " of " + std::to_string(size);
      if (stopped)
        throw kernels::stopped("rendezvous on " + where(o) + ": stopped (Ctrl-C or SIGTERM)" + what);
      throw error("rendezvous on " + where(o) + ": timed out after " + std::to_string(o.timeout_ms / 1000) + " s" + what);
    }
    accept_one(ls.get(), std::min(ms_left(until), 20), hs, until);
    for (auto& h : hs.take()) {
      if (!h.failure.empty())
        dropped(h);
      else if (auto why = refusal(h, admission{o.token, size, have, o.check_address}); !why.empty())
        refuse(h, why);
      else {
        table[static_cast<std::size_t>(h.rank)] = std::move(h.address);
        have[static_cast<std::size_t>(h.rank)] = true;
        conns[static_cast<std::size_t>(h.rank)] = std::move(h.conn);
        --missing;
      }
    }
  }
  auto reply = table_reply(table);
  for (int r = 1; r < size; ++r) {
    try {
      io_all(conns[static_cast<std::size_t>(r)].get(), reply.bytes.data(), reply.bytes.size(), true,
             clock_type::now() + std::chrono::seconds(10));
    } catch (const error& e) {
      throw error("rendezvous: rank " + std::to_string(r) + " left before the table was sent: " + e.what());
    }
  }
  if (o.keep_listener != nullptr)
    *o.keep_listener = ls.release();
  return table;
}

std::vector<std::vector<std::uint8_t>> join(int rank, int size, const rendezvous_options& o,
                                            const std::vector<std::uint8_t>& mine) {
  const auto until = clock_type::now() + std::chrono::milliseconds(o.timeout_ms);
  std::string last = "no attempt";
  while (true) {
    auto* ai = resolve(o, false);
    socket_fd s(::socket(ai->ai_family, SOCK_STREAM, 0));
    const int rc = ::connect(s.get(), ai->ai_addr, ai->ai_addrlen);
    ::freeaddrinfo(ai);
    if (rc != 0) {
      last = std::strerror(errno);
      if (o.late)
        throw error("rank " + std::to_string(rank) + ": cannot reach rank 0's rendezvous on " + where(o) + " (" + last +
                    "): the job this process was to rejoin is over");
      if (kernels::stop_requested())
        throw kernels::stopped("rank " + std::to_string(rank) + ": stopped (Ctrl-C or SIGTERM) while trying to reach the rendezvous on " +
                    where(o) + " (" + last + ")");
      if (clock_type::now() >= until)
        throw error("rank " + std::to_string(rank) + ": cannot reach the rendezvous on " + where(o) + " (" + last +
                    ") after " + std::to_string(o.timeout_ms / 1000) + " s: is rank 0 running?");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    try {
      buffer b;
      b.u32(hello_magic);
      b.blob(o.token.data(), o.token.size());
      b.u32(static_cast<std::uint32_t>(rank));
      b.u32(static_cast<std::uint32_t>(size));
      b.blob(mine.data(), mine.size());
      io_all(s.get(), b.bytes.data(), b.bytes.size(), true, until);
      const auto from_rank0 = socket_reader(s.get(), until);
      if (read_u32(from_rank0) != 0) {
        auto why = read_blob(from_rank0, max_token, "reason");
        throw error("rank 0 refused this process: " + std::string(why.begin(), why.end()));
      }
      std::vector<std::vector<std::uint8_t>> table;
      for (int r = 0; r < size; ++r)
        table.push_back(read_blob(from_rank0, max_blob, "address"));
      return table;
    } catch (const error& e) {
      throw error("rank " + std::to_string(rank) + ": rendezvous on " + where(o) + ": " + e.what() +
                  (o.late ? " (rank 0 ended the job before it let this process in)" : ""));
    }
  }
}

} // namespace

std::vector<std::vector<std::uint8_t>> rendezvous(int rank, int size, const rendezvous_options& opts,
                                                   const std::vector<std::uint8_t>& mine) {
  check(size >= 1 && rank >= 0 && rank < size,
        "rank " + std::to_string(rank) + " is out of range for " + std::to_string(size) + " processes");
  if (size == 1)
    return {mine};
  const auto& h = opts.host;
  const bool loopback = h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0;
  check(!opts.token.empty() || loopback,
        "rendezvous on " + where(opts) + ": the job has no token and " + h +
          " can be reached beyond this machine, so any process that reaches it could join as a rank. Set "
          "GRADWIRE_TOKEN to the same secret on every rank (e.g. export GRADWIRE_TOKEN=$(od -An -N16 -tx1 "
          "/dev/urandom | tr -d ' \\n') before srun or mpirun); --procs makes one itself");
  return rank == 0 ? serve(size, opts, mine) : join(rank, size, opts, mine);
}

struct late_joins::impl {
  socket_fd ls;
  rendezvous_options o;
  int size;
  std::vector<std::vector<std::uint8_t>> table;
  admit_fn admit;
  std::atomic<bool> stop{false};
  std::thread thread;

  /// A hello judged well formed, waiting for `admit` to say yes.
  struct waiting {
    hello h;
    clock_type::time_point until;
  };

  void run() {
    handshakes hs;
    std::vector<waiting> queue;
    const std::vector<bool> none(static_cast<std::size_t>(size), false); // every rank has joined once: `admit` judges
    while (!stop.load()) {
      accept_one(ls.get(), 100, hs, clock_type::now() + std::chrono::seconds(10));
      for (auto& h : hs.take()) {
        if (!h.failure.empty())
          dropped(h);
        else if (auto why = refusal(h, admission{o.token, size, none, o.check_address}); !why.empty())
          refuse(h, why);
        else if (queue.size() >= static_cast<std::size_t>(handshakes::max_open))
          refuse(h, "too many processes waiting to rejoin");
        else
          queue.push_back({std::move(h), clock_type::now() + std::chrono::seconds(10)});
      }
      for (auto it = queue.begin(); it != queue.end();) {
        std::string why;
        try {
          why = admit(it->h.rank, it->h.address);
        } catch (const std::exception& e) {
          why = e.what();
        }
        const bool later = why.rfind("later: ", 0) == 0;
        if (later && clock_type::now() < it->until) {
          ++it;
          continue;
        }
        if (!why.empty())
          refuse(it->h, later ? why.substr(7) : why);
        else {
          table[static_cast<std::size_t>(it->h.rank)] = it->h.address;
          auto reply = table_reply(table);
          try {
            io_all(it->h.conn.get(), reply.bytes.data(), reply.bytes.size(), true,
                   clock_type::now() + std::chrono::seconds(10));
          } catch (const error& e) {
            log::warn("rendezvous: rank {}'s new process left before the table was sent: {}", it->h.rank, e.what());
          }
        }
        it = queue.erase(it);
      }
    }
  }
};

late_joins::late_joins(int listener, rendezvous_options opts, int size, std::vector<std::vector<std::uint8_t>> table,
                       admit_fn admit)
    : p_(std::make_unique<impl>()) {
  check(listener >= 0 && size >= 2 && static_cast<int>(table.size()) == size && admit,
        "late_joins: a listening socket, the job's table and an admission are needed");
  p_->ls = socket_fd(listener);
  p_->o = std::move(opts);
  p_->size = size;
  p_->table = std::move(table);
  p_->admit = std::move(admit);
  p_->thread = std::thread([this] { p_->run(); });
}

late_joins::~late_joins() {
  p_->stop = true;
  p_->thread.join();
}

} // namespace gradwire::transport
