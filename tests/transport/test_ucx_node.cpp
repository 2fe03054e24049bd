// A node (proxies, the codec, the job token) over the UCX link for real:
// garbage and oversized frames are refused and good traffic goes on, pushed
// gradients go by shared-memory reference and other messages are copied;
// the rendezvous refuses a wrong job token and names an unreachable rank 0.
#include "actor_env.hpp"
#include "actors/messages.hpp"
#include "transport/codec.hpp"
#include "transport/node.hpp"
#include "transport/rendezvous.hpp"
#include "transport/shm_lending.hpp"
#include "transport/ucx_link.hpp"
#include "ucx_support.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

using namespace gwtest;

namespace {
/// Slots these tests publish in (transport/slots.hpp: free for tests).
constexpr std::uint32_t ucx_sink_slot = transport::slots::user(0), ucx_shard_slot = transport::slots::user(1);
} // namespace

TEST_CASE("UCX node: garbage and oversized frames are refused, good traffic goes on") {
  gwtest::actor_env env(1);
  auto& sys = *env.sys;
  auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 20); // rank 0 takes data frames up to 1 MiB
  auto* raw = l1.get();
  raw->start({});
  auto n0 = std::make_shared<node>(sys, std::move(l0), "job");
  std::promise<float> got;
  auto sink = sys.spawn([&got](caf::event_based_actor* self) -> caf::behavior {
    return {[&got, self](actors::step_atom, const actors::slice& s) {
      got.set_value(s.data()[3]);
      self->quit();
    }};
  });
  n0->publish(ucx_sink_slot, sink);
  n0->start();
  raw->send(0, {0x1111, 0x2222, 0x3333}, {});                          // garbage header
  raw->send(0, {1, 2}, actors::slice::zeros({std::int64_t{1} << 19}));   // 2 MiB: over rank 0's limit
  frame_context c;
  c.token = token_hash("job");
  c.rank = 1;
  auto f = encode(caf::make_message(actors::step_atom::value, pattern(64, 1)), c, ucx_sink_slot, {}, [](const caf::actor&) {
    return actor_ref{};
  });
  raw->send(0, f.header, f.data); // a good frame
  auto fut = got.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(fut.get() == 1 + 3 * 0.5f);
  CHECK(n0->rejected() == 2);
  n0->close(1000);
  raw->close(1000);
}

TEST_CASE("rendezvous refuses a process with the wrong job token, and times out naming the rank") {
  rendezvous_options r0, r1;
  r0.port = r1.port = free_port();
  r0.token = "right";
  r1.token = "wrong";
  r0.timeout_ms = 1500;
  r1.timeout_ms = 5000;
  auto joiner = std::async(std::launch::async, [&] { return rendezvous(1, 2, r1, {1, 2, 3}); });
  CHECK_THROWS_WITH(rendezvous(0, 2, r0, {9}), Catch::Contains("waiting for rank(s) 1"));
  CHECK_THROWS_WITH(joiner.get(), Catch::Contains("refused") && Catch::Contains("wrong job token"));
}

TEST_CASE("rendezvous: silent connections hold up no one, the real ranks join") {
  // 13 connections that never say a word, opened before rank 1 and held
  // open throughout. Each gets a handshake of its own, so rank 1's hello is
  // read at once; one at a time, the first silent one would take the whole
  // 4 s bound and the rendezvous would fail.
  rendezvous_options o;
  o.port = free_port();
  o.token = "t";
  o.timeout_ms = 4000;
  auto server = std::async(std::launch::async, [&] { return rendezvous(0, 3, o, {0}); });
  std::vector<int> silent;
  for (int i = 0; i < 13; ++i)
    for (int tries = 0; tries < 200; ++tries) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(o.port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        silent.push_back(fd);
        break;
      }
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  REQUIRE(silent.size() == 13);
  auto r1 = std::async(std::launch::async, [&] { return rendezvous(1, 3, o, {1}); });
  auto r2 = std::async(std::launch::async, [&] { return rendezvous(2, 3, o, {2}); });
  const std::vector<std::vector<std::uint8_t>> want = {{0}, {1}, {2}};
  CHECK(server.get() == want);
  CHECK(r1.get() == want);
  CHECK(r2.get() == want);
  for (int fd : silent)
    ::close(fd);
}

TEST_CASE("rendezvous: a job reachable beyond this machine needs a token, on loopback it may go without") {
  rendezvous_options o;
  o.host = "10.11.12.13";
  o.port = free_port();
  CHECK_THROWS_WITH(rendezvous(0, 2, o, {0}), Catch::Contains("has no token") && Catch::Contains("GRADWIRE_TOKEN"));
  CHECK_THROWS_WITH(rendezvous(1, 2, o, {1}), Catch::Contains("has no token"));
  o.host = "127.0.0.1";
  o.timeout_ms = 10000;
  auto r1 = std::async(std::launch::async, [&] { return rendezvous(1, 2, o, {1}); });
  const std::vector<std::vector<std::uint8_t>> want = {{0}, {1}};
  CHECK(rendezvous(0, 2, o, {0}) == want);
  CHECK(r1.get() == want);
}

TEST_CASE("rendezvous: a rank that cannot reach rank 0 says so") {
  rendezvous_options r;
  r.port = free_port();
  r.timeout_ms = 300;
  CHECK_THROWS_WITH(rendezvous(1, 2, r, {1}), Catch::Contains("cannot reach the rendezvous") &&
                                                   Catch::Contains("is rank 0 running"));
}

TEST_CASE("UCX node: pushed gradients go by shared-memory reference, other messages are copied") {
  // transport.shm_refs: a tensor whose sender never writes it again (a ring
  // chunk, a pushed gradient, a gossip snapshot, any reply) may travel as a
  // reference into the sender's arena; any other message's tensor is copied.
  // Both links live in this process, so tensors allocated from here on lie
  // in rank 1's arena: rank 1 sends, rank 0 answers (its replies are copied
  // here, where its memory is not an arena of its own).
  gwtest::actor_env env0(1), env1(1);
  auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 31, true, true);
  arena_allocation in_rank1(l1->arena_allocator(), std::size_t{64} << 10);
  auto* raw1 = l1.get();
  auto n0 = std::make_shared<node>(*env0.sys, std::move(l0), "job");
  auto n1 = std::make_shared<node>(*env1.sys, std::move(l1), "job");
  std::promise<std::vector<float>> copied;
  auto shard = env0.sys->spawn([&copied](caf::event_based_actor*) -> caf::behavior {
    return {
      [](actors::push_atom, const actors::slice& g) { return static_cast<double>(g.data()[7] + g.data()[99999]); },
      [](actors::push_pull_atom, const actors::slice& g) {
        auto back = actors::slice::empty({g.numel()});
        std::memcpy(back.data(), g.data(), g.bytes());
        return back;
      },
      [&copied](actors::step_atom, const actors::slice& s) { copied.set_value(s.to_vector()); },
    };
  });
  n0->publish(ucx_shard_slot, shard);
  n0->start();
  n1->start();
  for (int i = 0; i < 5000 && raw1->peers_mapped() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(raw1->peers_mapped() == 1);
  auto proxy = n1->remote(0, ucx_shard_slot);
  caf::scoped_actor self{*env1.sys};
  auto big = pattern(100000, 3.f);
  self->send(proxy, actors::step_atom::value, big);
  auto fut = copied.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(fut.get() == big.to_vector());
  CHECK(raw1->referenced() == 0);
  double sum = 0;
  self->request(proxy, std::chrono::seconds(20), actors::push_atom::value, big)
    .receive([&](double s) { sum = s; }, [&](caf::error& e) { FAIL(env1.sys->render(e)); });
  CHECK(sum == Approx(big.data()[7] + big.data()[99999]));
  CHECK(raw1->referenced() == 1);
  std::vector<float> echoed;
  self->request(proxy, std::chrono::seconds(20), actors::push_pull_atom::value, big)
    .receive([&](const actors::slice& s) { echoed = s.to_vector(); }, [&](caf::error& e) { FAIL(env1.sys->render(e)); });
  CHECK(echoed == big.to_vector());
  CHECK(raw1->referenced() == 2);
  // Both views let go on rank 0: nothing stays lent.
  for (int i = 0; i < 5000 && raw1->lent() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(raw1->lent() == 0);
  anon_send_exit(shard, caf::exit_reason::user_shutdown);
  n1->close(1000);
  n0->close(1000);
}

namespace {
/// A gradwire address envelope (ucx_setup::pack's layout) around `ucx`.
std::vector<std::uint8_t> envelope(const std::vector<std::uint8_t>& ucx) {
  const std::uint64_t magic = 0x4757414444523031ull; // "GWADDR01"
  std::vector<std::uint8_t> out(8);
  std::memcpy(out.data(), &magic, 8);
  auto field = [&](const std::uint8_t* p, std::uint32_t n) {
    const auto at = out.size();
    out.resize(at + 4 + n);
    std::memcpy(out.data() + at, &n, 4);
    if (n)
      std::memcpy(out.data() + at + 4, p, n);
  };
  field(ucx.data(), static_cast<std::uint32_t>(ucx.size()));
  field(nullptr, 0); // host
  field(nullptr, 0); // FIFO sizes
  return out;
}
} // namespace

TEST_CASE("rendezvous: a hello whose UCX address UCX cannot parse is refused, and the real rank still joins") {
  ucx_options uo;
  uo.tls = "tcp";
  ucx_link l0(0, 2, uo), l1(1, 2, uo);
  // UCX asserts (aborting the process) on these: checked in a child process.
  std::vector<std::uint8_t> garbage(64);
  for (std::size_t i = 0; i < garbage.size(); ++i)
    garbage[i] = static_cast<std::uint8_t>(0xA5 ^ (i * 37));
  CHECK(l0.check_address(l1.address()) == "");
  CHECK(l0.check_address({1, 2, 3}) == "not a whole gradwire address");
  CHECK_THAT(l0.check_address(envelope(garbage)), Catch::Contains("UCX cannot parse it"));
  CHECK(l0.check_address(envelope({})) == "an empty UCX address");
  rendezvous_options o;
  o.port = free_port();
  o.token = "t";
  o.timeout_ms = 10000;
  auto r0opts = o;
  r0opts.check_address = [&](const std::vector<std::uint8_t>& b) { return l0.check_address(b); };
  auto server = std::async(std::launch::async, [&] { return rendezvous(0, 2, r0opts, l0.address()); });
  CHECK_THROWS_WITH(rendezvous(1, 2, o, envelope(garbage)),
                    Catch::Contains("refused") && Catch::Contains("rank 1's address") &&
                      Catch::Contains("UCX cannot parse it"));
  auto table = rendezvous(1, 2, o, l1.address());
  CHECK(server.get() == table);
  CHECK(table[1] == l1.address());
}

TEST_CASE("rendezvous: a new process for a lost rank joins late on the same socket and only as rank 0 admits it") {
  rendezvous_options o;
  o.port = free_port();
  o.token = "t";
  o.timeout_ms = 5000;
  int listener = -1;
  auto o0 = o;
  o0.keep_listener = &listener;
  auto r1 = std::async(std::launch::async, [&] { return rendezvous(1, 3, o, {1}); });
  auto r2 = std::async(std::launch::async, [&] { return rendezvous(2, 3, o, {2}); });
  auto table = rendezvous(0, 3, o0, {0});
  r1.get();
  r2.get();
  REQUIRE(listener >= 0); // still listening after the rendezvous
  std::atomic<int> asked{0};
  std::atomic<bool> lost{false}; // rank 2 is lost once the test says so
  late_joins late(listener, o, 3, table, [&](int r, const std::vector<std::uint8_t>& address) -> std::string {
    ++asked;
    if (r == 1)
      return "rank 1 is alive and well";
    if (!lost.load())
      return "later: rank 2 is still in the job";
    return address == std::vector<std::uint8_t>{22} ? "" : "not the address the test sent";
  });
  auto wrong = o;
  wrong.token = "wrong";
  CHECK_THROWS_WITH(rendezvous(2, 3, wrong, {22}), Catch::Contains("wrong job token"));
  CHECK_THROWS_WITH(rendezvous(1, 3, o, {11}), Catch::Contains("rank 1 is alive and well"));
  auto twice = o;
  CHECK_THROWS_WITH(rendezvous(2, 4, twice, {22}), Catch::Contains("4 processes"));
  // Asked before rank 0 knows the rank is lost: held, then admitted with
  // the table, its own slot now its new address.
  auto replacement = std::async(std::launch::async, [&] { return rendezvous(2, 3, o, {22}); });
  while (asked.load() < 3) // the refused rank 1, then the held rank 2 at least once
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  lost = true;
  const std::vector<std::vector<std::uint8_t>> want = {{0}, {1}, {22}};
  CHECK(replacement.get() == want);
}
