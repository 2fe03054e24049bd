#pragma once
// What the UCX tests share: a free loopback port, two connected UCX links
// (ranks 0 and 1) in this process, and a recognisable payload.
#include "actors/messages.hpp"
#include "transport/rendezvous.hpp"
#include "transport/ucx_link.hpp"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <string>
#include <utility>

namespace gwtest {

using namespace gradwire;
using namespace gradwire::transport;

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Two connected UCX links (ranks 0 and 1) in this process.
inline std::pair<std::unique_ptr<ucx_link>, std::unique_ptr<ucx_link>> connected_pair(const std::string& tls,
                                                                               std::size_t max_data = std::size_t{1} << 31,
                                                                               bool progress_thread0 = true,
                                                                               bool shm_refs = false,
                                                                               int progress_nice0 = 0,
                                                                               std::size_t fifo_elem_bytes = 512,
                                                                               bool shm_refs1 = true) {
  ucx_options o;
  o.tls = tls;
  o.fifo_elem_bytes = fifo_elem_bytes;
  o.shm_refs = shm_refs;
  o.arena_bytes = std::size_t{64} << 20;
  o.max_data_bytes = max_data;
  ucx_options o0 = o;
  o0.progress_thread = progress_thread0;
  o0.progress_nice = progress_nice0;
  auto l0 = std::make_unique<ucx_link>(0, 2, o0);
  ucx_options o1 = o;
  o1.shm_refs = shm_refs && shm_refs1;
  auto l1 = std::make_unique<ucx_link>(1, 2, o1);
  rendezvous_options ro;
  ro.port = free_port();
  ro.token = "t";
  ro.timeout_ms = 10000;
  auto a1 = std::async(std::launch::async, [&] { return rendezvous(1, 2, ro, l1->address()); });
  auto table0 = rendezvous(0, 2, ro, l0->address());
  auto table1 = a1.get();
  REQUIRE(table0 == table1);
  l0->connect(table0);
  l1->connect(table1);
  return {std::move(l0), std::move(l1)};
}

inline actors::slice pattern(std::size_t n, float seed) {
  auto t = actors::slice::empty({static_cast<std::int64_t>(n)});
  for (std::size_t i = 0; i < n; ++i)
    t.data()[i] = seed + static_cast<float>(i % 1000) * 0.5f;
  return t;
}

} // namespace gwtest
