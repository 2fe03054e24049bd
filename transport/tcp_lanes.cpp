#include "transport/tcp_lanes.hpp"

#include "kernels/error.hpp"
#include "transport/comm_address.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

namespace gradwire::transport {

namespace {
constexpr std::uint16_t lane_magic = 0x4c47;                 // "GL"
constexpr std::uint64_t hello_magic = 0x4f4c4c45484c5747ull; // "GWLHELLO"
constexpr std::uint64_t address_magic = 0x534e414c454e4c47ull;
constexpr std::size_t most_addresses = 16;

using clock_type = std::chrono::steady_clock;

/// Both sides of a connection say who they are: the job, the rank, and
/// the nonce of the side they meant to reach.
struct hello {
  std::uint64_t magic = hello_magic;
  std::uint64_t token = 0;
  std::uint64_t nonce = 0; ///< the receiver's
  std::uint32_t from = 0;
  std::uint32_t size = 0;
};
static_assert(sizeof(hello) == 32);

std::string errno_text(int e) { return std::strerror(e); }

std::string ip_text(std::uint32_t ip, std::uint16_t port) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ip;
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(port);
}

int ms_left(clock_type::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

bool wait_for(int fd, short events, clock_type::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0)
      return true;
    if (n == 0 || errno != EINTR)
      return false;
  }
}

/// Moves exactly n bytes on a non-blocking socket before `deadline`; "" or why not.
std::string move_all(int fd, void* buf, std::size_t n, bool out, clock_type::time_point deadline) {
  auto* p = static_cast<std::uint8_t*>(buf);
  std::size_t done = 0;
  while (done < n) {
    const auto got = out ? ::send(fd, p + done, n - done, MSG_NOSIGNAL) : ::recv(fd, p + done, n - done, 0);
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    if (got == 0)
      return "connection closed";
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return errno_text(errno);
    if (!wait_for(fd, out ? POLLOUT : POLLIN, deadline))
      return "no answer in time";
  }
  return "";
}

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// The IPv4 addresses of the interfaces that are up, loopback last, in
/// network byte order; GRADWIRE_SOCKET_IFNAME (comma-separated names)
/// keeps only those interfaces.
std::vector<std::uint32_t> local_addresses() {
  const char* env = std::getenv("GRADWIRE_SOCKET_IFNAME");
  const auto only = comm_detail::split_list(env ? env : "");
  std::vector<std::uint32_t> out, loop;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0)
    throw error("collective lanes: listing interfaces: " + errno_text(errno));
  for (auto* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
      continue;
    if (!only.empty() && std::find(only.begin(), only.end(), i->ifa_name) == only.end())
      continue;
    const auto ip = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    auto& into = (i->ifa_flags & IFF_LOOPBACK) ? loop : out;
    if (std::find(into.begin(), into.end(), ip) == into.end())
      into.push_back(ip);
  }
  ::freeifaddrs(all);
  out.insert(out.end(), loop.begin(), loop.end());
  if (out.size() > most_addresses)
    out.resize(most_addresses);
  if (out.empty())
    throw error(only.empty() ? "collective lanes: this host has no IPv4 interface that is up"
                             : "collective lanes: no IPv4 interface named in GRADWIRE_SOCKET_IFNAME is up");
  return out;
}

template <typename T> void put(std::vector<std::uint8_t>& out, const T& v) {
  const auto at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}
} // namespace

lane_op lane_send(int fd, int peer, const void* buf, std::size_t bytes, std::uint32_t seq, int step) {
  lane_op o;
  o.fd = fd;
  o.peer = peer;
  o.head = {seq, static_cast<std::uint16_t>(step), lane_magic, bytes};
  o.body = static_cast<std::uint8_t*>(const_cast<void*>(buf)); // only read from
  o.bytes = bytes;
  return o;
}

lane_op lane_recv(int fd, int peer, void* buf, std::size_t bytes, std::uint32_t seq, int step, float* accumulate) {
  lane_op o;
  o.fd = fd;
  o.peer = peer;
  o.recv = true;
  o.want = {seq, static_cast<std::uint16_t>(step), lane_magic, bytes};
  o.body = static_cast<std::uint8_t*>(buf);
  o.bytes = bytes;
  o.accumulate = accumulate;
  return o;
}

namespace {
void check_header(const lane_op& o) {
  const auto& h = o.head;
  const auto& w = o.want;
  const std::string who = "rank " + std::to_string(o.peer);
  if (h.magic != lane_magic)
    throw error(who + " sent a message that is not the collective's (bad header) at step " + std::to_string(w.step));
  if (h.seq != w.seq || h.step != w.step)
    throw error(who + " sent step " + std::to_string(h.step) + " of collective " + std::to_string(h.seq) +
                " where step " + std::to_string(w.step) + " of collective " + std::to_string(w.seq) +
                " was expected (do all ranks call the same collectives in the same order?)");
  if (h.bytes > w.bytes)
    throw error(who + " sent more than the " + std::to_string(w.bytes) + " bytes expected at step " +
                std::to_string(w.step));
  if (h.bytes < w.bytes)
    throw error(who + " sent " + std::to_string(h.bytes) + " bytes at step " + std::to_string(w.step) + ", " +
                std::to_string(w.bytes) + " expected (do all ranks call with the same size?)");
}
} // namespace

bool lane_advance(lane_op& o) {
  constexpr std::size_t head_size = sizeof(lane_header);
  for (;;) {
    if (o.head_done == head_size && o.body_done == o.bytes)
      return true;
    iovec iov[2];
    int k = 0;
    if (o.head_done < head_size)
      iov[k++] = {reinterpret_cast<std::uint8_t*>(&o.head) + o.head_done, head_size - o.head_done};
    if (o.body_done < o.bytes)
      iov[k++] = {o.body + o.body_done, o.bytes - o.body_done};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<std::size_t>(k);
    const auto got = o.recv ? ::recvmsg(o.fd, &m, MSG_DONTWAIT) : ::sendmsg(o.fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return false;
      if (errno == EINTR)
        continue;
      throw error(std::string(o.recv ? "receiving from" : "sending to") + " rank " + std::to_string(o.peer) + ": " +
                  errno_text(errno) + " (did it die?)");
    }
    if (got == 0)
      throw error("rank " + std::to_string(o.peer) +
                  " closed its connection (it failed, and says why itself, or it died)");
    auto g = static_cast<std::size_t>(got);
    const auto h = std::min(g, head_size - o.head_done);
    o.head_done += h;
    g -= h;
    if (o.recv && h > 0 && o.head_done == head_size)
      check_header(o); // before any byte of the body is used
    o.body_done += g;
    if (o.accumulate) {
      const auto ready = o.body_done / sizeof(float);
      const auto* in = reinterpret_cast<const float*>(o.body);
      for (std::size_t i = o.added; i < ready; ++i)
        o.accumulate[i] += in[i];
      o.added = ready;
    }
  }
}

tcp_lanes::tcp_lanes(int rank, int size, std::uint64_t token_hash, int timeout_ms)
    : rank_(rank), size_(size), token_(token_hash), timeout_ms_(timeout_ms), fds_(static_cast<std::size_t>(size), -1) {
  std::random_device rd;
  nonce_ = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count());
  mine_ = local_addresses();
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener_ < 0)
    throw error("collective lanes: socket: " + errno_text(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener_, size + 64) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    ::close(listener_);
    throw error("collective lanes: listening: " + errno_text(e));
  }
  port_ = ntohs(a.sin_port);
}

tcp_lanes::~tcp_lanes() {
  for (int fd : fds_)
    if (fd >= 0)
      ::close(fd);
  if (listener_ >= 0)
    ::close(listener_);
}

void tcp_lanes::shut_down() {
  for (int fd : fds_)
    if (fd >= 0)
      ::shutdown(fd, SHUT_RDWR);
}

std::vector<std::uint8_t> tcp_lanes::address() const {
  std::vector<std::uint8_t> out;
  put(out, address_magic);
  put(out, nonce_);
  put(out, port_);
  put(out, static_cast<std::uint16_t>(mine_.size()));
  for (auto ip : mine_)
    put(out, ip);
  return out;
}

tcp_lanes::peer_address tcp_lanes::parse(const std::vector<std::uint8_t>& blob, int rank) {
  const std::string who = "collective lanes: rank " + std::to_string(rank) + "'s address";
  peer_address p;
  std::uint64_t magic = 0;
  std::uint16_t count = 0;
  check(blob.size() >= 20, who + " is truncated (" + std::to_string(blob.size()) + " bytes)");
  std::memcpy(&magic, blob.data(), 8);
  std::memcpy(&p.nonce, blob.data() + 8, 8);
  std::memcpy(&p.port, blob.data() + 16, 2);
  std::memcpy(&count, blob.data() + 18, 2);
  check(magic == address_magic, who + " is not a lane address");
  check(count >= 1 && count <= most_addresses, who + " lists " + std::to_string(count) + " IPv4 addresses (1 to " +
                                                   std::to_string(most_addresses) + " expected)");
  check(blob.size() == 20 + 4 * std::size_t{count}, who + " has " + std::to_string(blob.size()) + " bytes, " +
                                                        std::to_string(20 + 4 * count) + " expected");
  check(p.port != 0, who + " names port 0");
  p.ipv4.resize(count);
  std::memcpy(p.ipv4.data(), blob.data() + 20, 4 * std::size_t{count});
  return p;
}

int tcp_lanes::dial(int peer, const peer_address& a, std::string& why) const {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms_);
  for (auto ip : a.ipv4) {
    const auto where = ip_text(ip, a.port);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
      throw error("collective lanes: socket: " + errno_text(errno));
    tune(fd);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(a.port);
    sa.sin_addr.s_addr = ip;
    std::string err;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      if (errno != EINPROGRESS)
        err = errno_text(errno);
      else if (!wait_for(fd, POLLOUT, std::min(deadline, clock_type::now() + std::chrono::seconds(5))))
        err = "no connection in time";
      else {
        int e = 0;
        socklen_t len = sizeof e;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
        if (e != 0)
          err = errno_text(e);
      }
    }
    if (err.empty()) {
      hello h;
      h.token = token_;
      h.nonce = a.nonce;
      h.from = static_cast<std::uint32_t>(rank_);
      h.size = static_cast<std::uint32_t>(size_);
      err = move_all(fd, &h, sizeof h, true, deadline);
      hello back;
      if (err.empty())
        err = move_all(fd, &back, sizeof back, false, deadline);
      if (err.empty() && (back.magic != hello_magic || back.token != token_ || back.nonce != nonce_ ||
                          back.from != static_cast<std::uint32_t>(peer) || back.size != h.size))
        err = "another process answered (not rank " + std::to_string(peer) + " of this job)";
    }
    if (err.empty())
      return fd;
    ::close(fd);
    why += (why.empty() ? "" : "; ") + where + ": " + err;
  }
  return -1;
}

void tcp_lanes::accept_from_higher(const std::vector<peer_address>& peers, const std::vector<bool>& want) {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms_);
  auto missing = [&] {
    std::string who;
    for (int r = rank_ + 1; r < size_; ++r)
      if (want[static_cast<std::size_t>(r)] && fds_[static_cast<std::size_t>(r)] < 0)
        who += (who.empty() ? "" : ", ") + std::to_string(r);
    return who;
  };
  while (!missing().empty()) {
    if (!wait_for(listener_, POLLIN, deadline))
      throw error("collective lanes (rank " + std::to_string(rank_) + "): no connection from rank(s) " + missing() +
                  " within " + std::to_string(timeout_ms_) + " ms");
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    tune(fd);
    // A stray or wrong connection is cut off; the wait goes on.
    hello h;
    const auto soon = std::min(deadline, clock_type::now() + std::chrono::seconds(2));
    const bool ok = move_all(fd, &h, sizeof h, false, soon).empty() && h.magic == hello_magic && h.token == token_ &&
                    h.nonce == nonce_ && h.size == static_cast<std::uint32_t>(size_) &&
                    h.from > static_cast<std::uint32_t>(rank_) && h.from < static_cast<std::uint32_t>(size_) &&
                    want[h.from] && fds_[h.from] < 0;
    if (ok) {
      hello back;
      back.token = token_;
      back.nonce = peers[h.from].nonce;
      back.from = static_cast<std::uint32_t>(rank_);
      back.size = static_cast<std::uint32_t>(size_);
      if (move_all(fd, &back, sizeof back, true, soon).empty()) {
        fds_[h.from] = fd;
        continue;
      }
    }
    ::close(fd);
  }
}

void tcp_lanes::connect(const std::vector<std::vector<std::uint8_t>>& addresses, const std::vector<bool>& want) {
  check(addresses.size() == static_cast<std::size_t>(size_) && want.size() == addresses.size(),
        "collective lanes: one address per rank expected");
  std::vector<peer_address> peers(addresses.size());
  for (int r = 0; r < size_; ++r) // every address checked before any connection
    if (r != rank_ && want[static_cast<std::size_t>(r)])
      peers[static_cast<std::size_t>(r)] = parse(addresses[static_cast<std::size_t>(r)], r);
  for (int r = 0; r < rank_; ++r) {
    if (!want[static_cast<std::size_t>(r)])
      continue;
    std::string why;
    const int fd = dial(r, peers[static_cast<std::size_t>(r)], why);
    if (fd < 0)
      throw error("collective lanes (rank " + std::to_string(rank_) + "): cannot reach rank " + std::to_string(r) +
                  ": " + why + " (GRADWIRE_SOCKET_IFNAME picks the interfaces)");
    fds_[static_cast<std::size_t>(r)] = fd;
  }
  accept_from_higher(peers, want);
  ::close(listener_);
  listener_ = -1;
}

} // namespace gradwire::transport
