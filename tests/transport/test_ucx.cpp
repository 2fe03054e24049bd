// The UCX link for real, two ranks as threads of this process, over shared
// memory and over TCP: eager and rendezvous frames arrive byte-exact; a
// node behind UCX refuses garbage and oversized frames and still delivers
// the next good one; the rendezvous refuses a wrong job token.
#include "actor_env.hpp"
#include "actors/messages.hpp"
#include "transport/codec.hpp"
#include "transport/node.hpp"
#include "transport/rendezvous.hpp"
#include "transport/shm_lending.hpp"
#include "transport/ucx_link.hpp"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <future>
#include <mutex>
#include <thread>

using namespace gradwire;

namespace {
/// Slots these tests publish in (transport/slots.hpp: free for tests).
constexpr std::uint32_t sink_slot = transport::slots::user(0), shard_slot = transport::slots::user(1);
} // namespace
using namespace gradwire::transport;

namespace {

int free_port() {
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
std::pair<std::unique_ptr<ucx_link>, std::unique_ptr<ucx_link>> connected_pair(const std::string& tls,
                                                                               std::size_t max_data = std::size_t{1} << 31,
                                                                               bool progress_thread0 = true,
                                                                               bool shm_refs = false,
                                                                               int progress_nice0 = 0,
                                                                               std::size_t fifo_elem_bytes = 512) {
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
  auto l1 = std::make_unique<ucx_link>(1, 2, o);
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

/// Nice values of this process's threads (/proc/self/task/*/stat, field 19).
std::vector<int> thread_nice_values() {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(e.path() / "stat");
    std::string line;
    std::getline(in, line);
    const auto close = line.rfind(')'); // the name may hold spaces
    if (close == std::string::npos)
      continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int f = 3; f <= 19 && rest >> field; ++f)
      if (f == 19)
        out.push_back(std::stoi(field));
  }
  return out;
}

actors::slice pattern(std::size_t n, float seed) {
  auto t = actors::slice::empty({static_cast<std::int64_t>(n)});
  for (std::size_t i = 0; i < n; ++i)
    t.data()[i] = seed + static_cast<float>(i % 1000) * 0.5f;
  return t;
}

} // namespace

TEST_CASE("UCX link: eager and rendezvous frames arrive byte-exact") {
  const std::string tls = GENERATE(std::string("posix,cma"), std::string("tcp"));
  INFO("UCX_TLS " << tls);
  auto [l0, l1] = connected_pair(tls);
  std::mutex mu;
  std::vector<std::pair<std::vector<std::uint64_t>, actors::slice>> got;
  std::promise<void> all;
  link::handlers h;
  h.receive = [&](const void* hdr, std::size_t bytes, kernels::tensor data) {
    std::lock_guard<std::mutex> lk(mu);
    std::vector<std::uint64_t> words(bytes / 8);
    std::memcpy(words.data(), hdr, bytes);
    got.emplace_back(std::move(words), std::move(data));
    if (got.size() == 3)
      all.set_value();
  };
  l0->start(h);
  l1->start({});
  const std::size_t sizes[] = {16, std::size_t{1} << 20, 0}; // eager, rendezvous (4 MiB), header only
  for (std::size_t k = 0; k < 3; ++k)
    l1->send(0, {k, 0xabcdef, k * 7}, sizes[k] ? pattern(sizes[k], static_cast<float>(k)) : actors::slice{});
  auto fut = all.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  for (const auto& [hdr, data] : got) {
    REQUIRE(hdr.size() == 3);
    const auto k = hdr[0];
    CHECK(hdr[1] == 0xabcdef);
    CHECK(hdr[2] == k * 7);
    if (sizes[k] == 0) {
      CHECK(!data.defined());
      continue;
    }
    REQUIRE(data.numel() == static_cast<std::int64_t>(sizes[k]));
    CHECK(reinterpret_cast<std::uintptr_t>(data.data()) % 64 == 0);
    CHECK(data.to_vector() == pattern(sizes[k], static_cast<float>(k)).to_vector());
  }
  l1->close(2000);
  l0->close(2000);
}

TEST_CASE("UCX link: ring chunks by shared-memory reference arrive exact, are released, and bad references are refused") {
  std::vector<std::string> rejected;
  {
    auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 31, true, true);
    // From here on this process's large tensors lie in rank 1's arena (the
    // link does not install its allocator: a job's setup does).
    arena_allocation in_rank1(l1->arena_allocator(), std::size_t{64} << 10);
    std::mutex mu;
    std::vector<std::pair<std::vector<std::uint64_t>, actors::slice>> got;
    // Rank 1 sends, rank 0 receives: both links live in this process and the
    // tensor allocator is the last connected one's (rank 1's arena).
    link::handlers h1;
    h1.receive = [&](const void* hdr, std::size_t hb, kernels::tensor data) {
      std::lock_guard<std::mutex> lk(mu);
      const auto* w = static_cast<const std::uint64_t*>(hdr);
      got.emplace_back(std::vector<std::uint64_t>(w, w + hb / 8), std::move(data));
    };
    h1.rejected = [&](const std::string& what) {
      std::lock_guard<std::mutex> lk(mu);
      rejected.push_back(what);
    };
    link::handlers h0;
    l0->start(h1);
    l1->start(h0);
    auto wait_for = [&](auto pred) {
      for (int i = 0; i < 5000 && !pred(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return pred();
    };
    REQUIRE(wait_for([&] { return l0->peers_mapped() == 1 && l1->peers_mapped() == 1; }));
    // Allocated in rank 1's arena (in_rank1).
    auto big = pattern(100000, 2.f);
    l1->send(0, {42, 7}, big, true);
    l1->send(0, {43}, pattern(100, 1.f), true); // below min_ref_bytes: copied
    REQUIRE(wait_for([&] {
      std::lock_guard<std::mutex> lk(mu);
      return got.size() == 2;
    }));
    {
      std::lock_guard<std::mutex> lk(mu);
      CHECK(got[0].first == std::vector<std::uint64_t>{42, 7});
      CHECK(got[0].second.to_vector() == big.to_vector());
      CHECK(got[1].second.to_vector() == pattern(100, 1.f).to_vector());
    }
    CHECK(l1->lent() == 1); // held until rank 0 lets go of its view
    {
      std::lock_guard<std::mutex> lk(mu);
      got.clear();
    }
    CHECK(wait_for([&] { return l1->lent() == 0; }));
    // A reference outside rank 0's arena and one from a rank that does not exist.
    l1->send(0, {0x475753484d524546ull, 1, 99, 0, std::uint64_t{1} << 40, 4096}, {});
    l1->send(0, {0x475753484d524546ull, 5, 99, 0, 0, 4096}, {});
    CHECK(wait_for([&] {
      std::lock_guard<std::mutex> lk(mu);
      return rejected.size() == 2;
    }));
    l0->close(2000);
    l1->close(2000);
  }
  REQUIRE(rejected.size() == 2);
  CHECK_THAT(rejected[0], Catch::Contains("shared-memory reference") && Catch::Contains("in rank 0's memory"));
  CHECK_THAT(rejected[1], Catch::Contains("no such rank"));
}

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
  n0->publish(sink_slot, sink);
  n0->start();
  raw->send(0, {0x1111, 0x2222, 0x3333}, {});                          // garbage header
  raw->send(0, {1, 2}, actors::slice::zeros({std::int64_t{1} << 19}));   // 2 MiB: over rank 0's limit
  frame_context c;
  c.token = token_hash("job");
  c.rank = 1;
  auto f = encode(caf::make_message(actors::step_atom::value, pattern(64, 1)), c, sink_slot, {}, [](const caf::actor&) {
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

TEST_CASE("rendezvous: a rank that cannot reach rank 0 says so") {
  rendezvous_options r;
  r.port = free_port();
  r.timeout_ms = 300;
  CHECK_THROWS_WITH(rendezvous(1, 2, r, {1}), Catch::Contains("cannot reach the rendezvous") &&
                                                   Catch::Contains("is rank 0 running"));
}

TEST_CASE("UCX link: a header too large for a rendezvous header travels inside the data frame") {
  auto [l0, l1] = connected_pair("posix,cma");
  std::promise<std::pair<std::vector<std::uint64_t>, actors::slice>> got;
  link::handlers h;
  h.receive = [&](const void* hdr, std::size_t bytes, kernels::tensor data) {
    std::vector<std::uint64_t> words(bytes / 8);
    std::memcpy(words.data(), hdr, bytes);
    got.set_value({std::move(words), std::move(data)});
  };
  l0->start(h);
  l1->start({});
  std::vector<std::uint64_t> big(20000); // 160 KB: UCX's rendezvous header limit is ~8 KiB
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = i * 2654435761u;
  l1->send(0, big, pattern(4096, 2));
  auto fut = got.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  auto [hdr, data] = fut.get();
  CHECK(hdr == big);
  CHECK(data.to_vector() == pattern(4096, 2).to_vector());
  l1->close(2000);
  l0->close(2000);
}

TEST_CASE("UCX link: a thread that polls the link receives frames and can reply from the handler") {
  // A ring worker waiting for its neighbour drives the link itself
  // (link::poll); a frame delivered there runs its handler on that thread,
  // holding the link's lock, and a send from the handler must be queued,
  // not deadlock. Rank 0 has no progress thread, so every delivery is a
  // polled one; rank 1 has its own.
  auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 31, false);
  constexpr int frames = 40;
  std::atomic<int> got{0}, replies{0}, on_poller{0}, bad{0};
  const auto poller = std::this_thread::get_id();
  ucx_link* back = l0.get();
  link::handlers h0;
  h0.receive = [&](const void* hdr, std::size_t bytes, kernels::tensor data) {
    std::uint64_t k = 0;
    std::memcpy(&k, hdr, sizeof k);
    const std::size_t n = k % 2 ? std::size_t{1} << 18 : 8; // odd frames by rendezvous (1 MiB)
    if (bytes != 16 || !data.defined() || data.to_vector() != pattern(n, static_cast<float>(k)).to_vector())
      ++bad;
    if (std::this_thread::get_id() == poller)
      ++on_poller;
    ++got;
    back->send(1, {k}, {}); // from inside the delivery
  };
  link::handlers h1;
  h1.receive = [&](const void*, std::size_t, kernels::tensor) { ++replies; };
  l0->start(h0);
  l1->start(h1);
  for (std::uint64_t k = 0; k < frames; ++k)
    l1->send(0, {k, 0}, pattern(k % 2 ? std::size_t{1} << 18 : 8, static_cast<float>(k)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((got < frames || replies < frames) && std::chrono::steady_clock::now() < deadline)
    l0->poll();
  CHECK(got == frames);
  CHECK(on_poller == frames);
  CHECK(replies == frames);
  CHECK(bad == 0);
  l1->close(2000);
  l0->close(2000);
}

TEST_CASE("UCX link: what a frame's handler sends leaves before the next frame from the same progress call is handled") {
  // A ring peer's reply to one frame must not wait while it handles the
  // next (its add of a neighbour's chunk, say). Rank 0 is polled, so both
  // frames of a pair lie in its FIFO before one poll takes them: frame 0's
  // handler replies; frame 1's handler waits (up to 2 s) for rank 1 to
  // have that reply, which it can only if the reply was posted in between.
  auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 31, false);
  constexpr int pairs = 5;
  std::atomic<int> handled{0}, replies{0}, seen{0};
  ucx_link* back = l0.get();
  link::handlers h0;
  h0.receive = [&](const void* hdr, std::size_t, kernels::tensor) {
    std::uint64_t k = 0;
    std::memcpy(&k, hdr, sizeof k);
    const int pair = static_cast<int>(k / 2);
    if (k % 2 == 0) {
      back->send(1, {k}, {});
    } else {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (replies.load() <= pair && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      if (replies.load() > pair)
        ++seen;
    }
    ++handled;
  };
  link::handlers h1;
  h1.receive = [&](const void*, std::size_t, kernels::tensor) { ++replies; };
  l0->start(h0);
  l1->start(h1);
  for (std::uint64_t pair = 0; pair < pairs; ++pair) {
    l1->send(0, {2 * pair}, {});
    l1->send(0, {2 * pair + 1}, {});
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // both in rank 0's FIFO
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (handled < 2 * static_cast<int>(pair + 1) && std::chrono::steady_clock::now() < deadline)
      l0->poll();
  }
  CHECK(handled == 2 * pairs);
  CHECK(seen == pairs);
  l1->close(2000);
  l0->close(2000);
}

TEST_CASE("UCX link: the progress thread runs at the nice value asked for, and still delivers") {
  // ucx_options::progress_nice: workers that poll the link leave the
  // progress thread the gaps; it must lower only itself, and keep working.
  auto count19 = [] {
    const auto v = thread_nice_values();
    return std::count(v.begin(), v.end(), 19);
  };
  const auto before = count19();
  auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 31, true, false, 19);
  std::atomic<int> got{0};
  link::handlers h0;
  h0.receive = [&](const void*, std::size_t, kernels::tensor) { ++got; };
  l0->start(h0);
  l1->start({});
  for (std::uint64_t k = 0; k < 5; ++k)
    l1->send(0, {k}, pattern(k % 2 ? std::size_t{1} << 18 : 8, 1.f)); // eager and rendezvous
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got < 5 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(got == 5); // delivered by rank 0's progress thread alone (nobody polls here)
  CHECK(count19() == before + 1); // that thread, and no other (rank 1's stays at 0)
  CHECK(getpriority(PRIO_PROCESS, 0) == 0); // nor this one
  l1->close(2000);
  l0->close(2000);
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
  n0->publish(shard_slot, shard);
  n0->start();
  n1->start();
  for (int i = 0; i < 5000 && raw1->peers_mapped() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(raw1->peers_mapped() == 1);
  auto proxy = n1->remote(0, shard_slot);
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

constexpr int fifo_frames = 2000, fifo_warm = 16, fifo_window = 64, fifo_ack_every = 8;

long minor_faults() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/// Rank `rank` of the FIFO test's two processes, connected through the
/// rendezvous on `port`, over posix shared memory with FIFO elements of
/// `elem` bytes.
std::unique_ptr<ucx_link> fifo_link(int rank, int port, std::size_t elem) {
  ucx_options o;
  o.tls = "posix";
  o.fifo_elem_bytes = elem;
  auto l = std::make_unique<ucx_link>(rank, 2, o);
  rendezvous_options ro;
  ro.port = port;
  ro.token = "t";
  ro.timeout_ms = 10000;
  l->connect(rendezvous(rank, 2, ro, l->address()));
  return l;
}

/// The sending rank of the FIFO test, as its own process: sends
/// fifo_frames 312-byte headers (a ring chunk's reference) with at most
/// fifo_window unacknowledged, and writes the page faults it took after
/// the first fifo_warm to GW_FIFO_OUT.
void fifo_sender(int port, std::size_t elem, const std::string& out) {
  auto link1 = fifo_link(1, port, elem);
  auto& l1 = *link1;
  std::atomic<int> acked{0};
  link::handlers h;
  h.receive = [&](const void* hdr, std::size_t, kernels::tensor) {
    acked = static_cast<int>(static_cast<const std::uint64_t*>(hdr)[0]);
  };
  l1.start(h);
  std::vector<std::uint64_t> header(39);
  for (std::size_t k = 0; k < header.size(); ++k)
    header[k] = k;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  // Small frames first (inline at any element size), until the endpoint
  // and both progress loops have run their first rounds.
  for (int k = 0; k < fifo_warm; ++k)
    l1.send(0, {static_cast<std::uint64_t>(k)}, {});
  while (acked < fifo_warm && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  const long before = minor_faults();
  for (int k = fifo_warm; k < fifo_frames && std::chrono::steady_clock::now() < until; ++k) {
    while (k - acked >= fifo_window && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    l1.send(0, header, {});
  }
  while (acked < fifo_frames && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  const long faults = minor_faults() - before;
  std::ofstream(out) << (acked == fifo_frames ? faults : -1) << "\n";
  l1.close(2000);
}

/// Page faults the sender took over fifo_frames - fifo_warm frames, with
/// both ranks at FIFO elements of `elem` bytes.
long sender_faults(std::size_t elem) {
  const int port = free_port();
  const std::string out = "/tmp/gradwire-fifo-" + std::to_string(::getpid()) + "-" + std::to_string(elem);
  const pid_t child = ::fork();
  if (child == 0) { // a fresh process: this binary again, running only the sender
    ::setenv("GW_FIFO_PORT", std::to_string(port).c_str(), 1);
    ::setenv("GW_FIFO_ELEM", std::to_string(elem).c_str(), 1);
    ::setenv("GW_FIFO_OUT", out.c_str(), 1);
    ::unsetenv("UCX_POSIX_FIFO_ELEM_SIZE"); // what this process's links set: the child sets its own
    ::unsetenv("UCX_SYSV_FIFO_ELEM_SIZE");
    ::execl("/proc/self/exe", "test_ucx", "[.fifo_sender]", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(child > 0);
  auto link0 = fifo_link(0, port, elem);
  auto& l0 = *link0;
  std::atomic<int> got{0};
  std::atomic<bool> well_formed{true};
  link::handlers h;
  h.receive = [&](const void* hdr, std::size_t bytes, kernels::tensor) {
    const int n = ++got;
    if (n > fifo_warm && (bytes != 39 * 8 || static_cast<const std::uint64_t*>(hdr)[38] != 38))
      well_formed = false;
    if (n % fifo_ack_every == 0)
      l0.send(1, {static_cast<std::uint64_t>(n)}, {});
  };
  l0.start(h);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  l0.close(2000);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(got == fifo_frames);
  CHECK(well_formed);
  long faults = -1;
  std::ifstream(out) >> faults;
  std::filesystem::remove(out);
  return faults;
}

} // namespace

TEST_CASE("FIFO sender (run by the next test in a process of its own)", "[.fifo_sender]") {
  const char* port = std::getenv("GW_FIFO_PORT");
  if (port == nullptr)
    return; // run by hand: nothing to do
  fifo_sender(std::atoi(port), static_cast<std::size_t>(std::atoll(std::getenv("GW_FIFO_ELEM"))), std::getenv("GW_FIFO_OUT"));
}

TEST_CASE("UCX link: between processes a ring chunk's reference header travels inside the shared-memory FIFO element") {
  // A chunk by reference is a 312-byte header with no data. In UCX's
  // default 128-byte FIFO elements it is copied into a receive descriptor
  // of the receiver's instead, whose pages the sending process faults in
  // as it works round them (~1,300 faults over the first ~150 allreduces
  // of 4 ranks); at 512 it fits the element.
  const long at_128 = sender_faults(128), at_512 = sender_faults(512);
  INFO("the sender's page faults over " << fifo_frames - fifo_warm << " frames: " << at_128
                                        << " with 128-byte elements, " << at_512 << " with 512");
  REQUIRE(at_128 >= 0);
  REQUIRE(at_512 >= 0);
  CHECK(at_512 * 4 < at_128);
}
