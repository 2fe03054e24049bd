// The communicator's TCP lanes (transport/tcp_lanes.hpp) on their own:
// real sockets on this host. A stray connection or another job's rank is
// cut off and the real peers still connect; a peer that sends another
// step or length, or closes mid-message, is named, and a receive never
// writes past its buffer.
#include "kernels/error.hpp"
#include "transport/tcp_lanes.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace gradwire;
using transport::lane_advance;
using transport::lane_recv;
using transport::lane_send;
using transport::tcp_lanes;

namespace {

/// Connects lanes[r] for every r at once; returns each one's error.
std::vector<std::string> connect_all(std::vector<std::unique_ptr<tcp_lanes>>& lanes) {
  const auto n = lanes.size();
  std::vector<std::vector<std::uint8_t>> addrs;
  for (auto& l : lanes)
    addrs.push_back(l->address());
  std::vector<std::string> errors(n);
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        std::vector<bool> want(n, true);
        want[r] = false;
        lanes[r]->connect(addrs, want);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts)
    t.join();
  return errors;
}

std::uint16_t port_of(const tcp_lanes& l) {
  const auto a = l.address();
  std::uint16_t port = 0;
  std::memcpy(&port, a.data() + 16, 2);
  return port;
}

int dial_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  return fd;
}

/// Drives a send and a receive until both are done (one thread: both ends).
void run_both(transport::lane_op& s, transport::lane_op& r) {
  bool sd = false, rd = false;
  while (!(sd && rd)) {
    sd = sd || lane_advance(s);
    rd = rd || lane_advance(r);
  }
}

} // namespace

TEST_CASE("tcp lanes: stray connections are cut off and three ranks still connect") {
  std::vector<std::unique_ptr<tcp_lanes>> lanes;
  for (int r = 0; r < 3; ++r)
    lanes.push_back(std::make_unique<tcp_lanes>(r, 3, 0xabc, 5000));
  // Before the ranks connect: one stray sends garbage, one sends nothing
  // and hangs up, one says hello with the right length and the wrong token.
  const int garbage = dial_loopback(port_of(*lanes[0]));
  const char junk[40] = "GET / HTTP/1.0\r\n\r\n";
  REQUIRE(::send(garbage, junk, sizeof junk, 0) == static_cast<ssize_t>(sizeof junk));
  ::close(dial_loopback(port_of(*lanes[0])));
  const int liar = dial_loopback(port_of(*lanes[1]));
  std::uint64_t hello[4] = {0x4f4c4c45484c5747ull, 0xdef, 0, 0x0000000300000002ull};
  REQUIRE(::send(liar, hello, sizeof hello, 0) == static_cast<ssize_t>(sizeof hello));
  const auto errors = connect_all(lanes);
  for (const auto& e : errors)
    CHECK(e == "");
  ::close(garbage);
  ::close(liar);
  // Every pair carries a message both ways.
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      if (a == b)
        continue;
      std::vector<float> out(1000, static_cast<float>(a)), in(1000, -1.f);
      auto s = lane_send(lanes[static_cast<std::size_t>(a)]->fd(b), b, out.data(), 4000, 7, 1);
      auto r = lane_recv(lanes[static_cast<std::size_t>(b)]->fd(a), a, in.data(), 4000, 7, 1);
      run_both(s, r);
      CHECK(in == out);
    }
}

TEST_CASE("tcp lanes: a rank of another job is refused and named") {
  std::vector<std::unique_ptr<tcp_lanes>> lanes;
  lanes.push_back(std::make_unique<tcp_lanes>(0, 2, 0x111, 600));
  lanes.push_back(std::make_unique<tcp_lanes>(1, 2, 0x222, 600)); // another token
  const auto errors = connect_all(lanes);
  CHECK(errors[0].find("no connection from rank(s) 1 within 600 ms") != std::string::npos);
  CHECK(errors[1].find("cannot reach rank 0") != std::string::npos);
}

TEST_CASE("tcp lanes: a bad address is named before any connection") {
  tcp_lanes a(0, 2, 1, 500), b(1, 2, 1, 500);
  auto addr = b.address();
  std::vector<std::vector<std::uint8_t>> addrs = {a.address(), addr};
  addrs[1].resize(addr.size() - 1);
  CHECK_THROWS_WITH(a.connect(addrs, {false, true}), Catch::Contains("rank 1's address has"));
  addrs[1] = addr;
  addrs[1][18] = 200; // 200 IPv4 addresses claimed
  CHECK_THROWS_WITH(a.connect(addrs, {false, true}), Catch::Contains("lists 200 IPv4 addresses"));
  addrs[1] = {1, 2, 3};
  CHECK_THROWS_WITH(a.connect(addrs, {false, true}), Catch::Contains("rank 1's address is truncated"));
}

TEST_CASE("tcp lanes: another step or length is named and nothing is written past the buffer") {
  std::vector<std::unique_ptr<tcp_lanes>> lanes;
  for (int r = 0; r < 2; ++r)
    lanes.push_back(std::make_unique<tcp_lanes>(r, 2, 5, 5000));
  REQUIRE(connect_all(lanes) == std::vector<std::string>{"", ""});
  const int to1 = lanes[0]->fd(1), from0 = lanes[1]->fd(0);
  std::vector<float> out(64, 1.f);
  std::vector<float> in(17, 0.f); // 16 floats expected, a guard after
  {
    auto s = lane_send(to1, 1, out.data(), 64 * 4, 3, 2); // step 2 where 1 is expected
    auto r = lane_recv(from0, 0, in.data(), 16 * 4, 3, 1);
    CHECK_THROWS_WITH(run_both(s, r), Catch::Contains("rank 0 sent step 2 of collective 3 where step 1"));
  }
  lanes.clear();
  for (int r = 0; r < 2; ++r)
    lanes.push_back(std::make_unique<tcp_lanes>(r, 2, 5, 5000));
  REQUIRE(connect_all(lanes) == std::vector<std::string>{"", ""});
  auto s = lane_send(lanes[0]->fd(1), 1, out.data(), 64 * 4, 3, 1); // 256 bytes where 64 are expected
  auto r = lane_recv(lanes[1]->fd(0), 0, in.data(), 16 * 4, 3, 1);
  CHECK_THROWS_WITH(run_both(s, r), Catch::Contains("rank 0 sent more than the 64 bytes expected at step 1"));
  CHECK(in[16] == 0.f);
}

TEST_CASE("tcp lanes: a peer that closes mid-message is named and accumulate adds what arrived") {
  std::vector<std::unique_ptr<tcp_lanes>> lanes;
  for (int r = 0; r < 2; ++r)
    lanes.push_back(std::make_unique<tcp_lanes>(r, 2, 9, 5000));
  REQUIRE(connect_all(lanes) == std::vector<std::string>{"", ""});
  std::vector<float> out(1 << 16), scratch(1 << 16), sum(1 << 16, 0.5f);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(i);
  auto s = lane_send(lanes[0]->fd(1), 1, out.data(), out.size() * 4, 1, 0);
  auto r = lane_recv(lanes[1]->fd(0), 0, scratch.data(), out.size() * 4, 1, 0, sum.data());
  run_both(s, r);
  for (std::size_t i = 0; i < out.size(); i += 997)
    CHECK(sum[i] == static_cast<float>(i) + 0.5f);
  // Rank 0 goes away with half a message sent: rank 1 names it.
  transport::lane_header h{2, 0, 0x4c47, 4000};
  REQUIRE(::send(lanes[0]->fd(1), &h, sizeof h, 0) == 16);
  REQUIRE(::send(lanes[0]->fd(1), out.data(), 100, 0) == 100);
  lanes[0].reset();
  std::vector<float> in(1000);
  auto r2 = lane_recv(lanes[1]->fd(0), 0, in.data(), 4000, 2, 0);
  CHECK_THROWS_WITH(
      [&] {
        while (!lane_advance(r2)) {
        }
      }(),
      Catch::Contains("rank 0 closed its connection"));
}
