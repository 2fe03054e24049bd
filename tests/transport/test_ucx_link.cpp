// The UCX link for real, two ranks as threads of this process, over shared
// memory and over TCP: eager and rendezvous frames arrive byte-exact,
// tensors lent by shared-memory reference arrive exact and are released,
// headers too large travel inside the data, a polling thread delivers and
// its handlers' sends leave in order, the progress thread's nice value.
#include "actor_env.hpp"
#include "actors/messages.hpp"
#include "transport/codec.hpp"
#include "transport/node.hpp"
#include "transport/rendezvous.hpp"
#include "transport/shm_lending.hpp"
#include "transport/ucx_link.hpp"
#include "transport/ucx_setup.hpp"
#include "ucx_support.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

using namespace gwtest;

namespace {

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

} // namespace

namespace {
/// The permission bits of every System V segment this process created.
std::vector<unsigned> own_sysv_modes() {
  std::ifstream table("/proc/sysvipc/shm");
  std::string line;
  std::getline(table, line);
  std::vector<unsigned> modes;
  while (std::getline(table, line)) {
    std::istringstream in(line);
    long long key = 0, id = 0, size = 0, cpid = 0;
    unsigned perms = 0;
    if (in >> key >> id >> std::oct >> perms >> std::dec >> size >> cpid && cpid == ::getpid())
      modes.push_back(perms & 0777u);
  }
  return modes;
}
} // namespace

TEST_CASE("UCX link: eager and rendezvous frames arrive byte-exact") {
  const std::string tls = GENERATE(std::string("posix,cma"), std::string("tcp"), std::string("sysv"));
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
    if (got.size() == 5)
      all.set_value();
  };
  l0->start(h);
  l1->start({});
  // Eager; rendezvous (4 MiB); header only; 64 KiB; 256 KiB and a float
  // (TCP alone sends all but the 4 MiB frame eagerly, tcp_only_config, the
  // last two in several of UCX's segments).
  const std::size_t sizes[] = {16, std::size_t{1} << 20, 0, 16384, 65537};
  for (std::size_t k = 0; k < 5; ++k)
    l1->send(0, {k, 0xabcdef, k * 7}, sizes[k] ? pattern(sizes[k], static_cast<float>(k)) : actors::slice{});
  auto fut = all.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto& [hdr, data] = got[i];
    REQUIRE(hdr.size() == 3);
    const auto k = hdr[0];
    CHECK(k == i); // one peer's frames arrive in the order it sent them
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
  // UCX makes its System V segments 0660; the link narrows them to the user.
  const auto modes = own_sysv_modes();
  if (tls == "sysv")
    CHECK(!modes.empty());
  for (unsigned m : modes)
    CHECK(m == 0600u);
  l1->close(2000);
  l0->close(2000);
}

TEST_CASE("UCX link: TCP alone is recognised in a transport list") {
  using transport::ucx_setup::tls_tcp_only;
  CHECK(tls_tcp_only("tcp"));
  CHECK(tls_tcp_only("tcp,self"));
  CHECK(tls_tcp_only("self,tcp,sockcm"));
  CHECK_FALSE(tls_tcp_only(""));
  CHECK_FALSE(tls_tcp_only("all"));
  CHECK_FALSE(tls_tcp_only("^posix"));
  CHECK_FALSE(tls_tcp_only("self"));
  CHECK_FALSE(tls_tcp_only("tcp,posix"));
  CHECK_FALSE(tls_tcp_only("sm,tcp"));
  CHECK_FALSE(tls_tcp_only("rc,tcp"));
  CHECK_FALSE(tls_tcp_only("tcpx"));
}

TEST_CASE("UCX link: ring chunks by shared-memory reference arrive exact, are released, and bad references are refused") {
  std::vector<std::string> rejected;
  {
    auto links = connected_pair("posix,cma", std::size_t{1} << 31, true, true); // (lambdas below capture l0, l1:
    auto& l0 = links.first;                                                     //  C++17 cannot capture a
    auto& l1 = links.second;                                                    //  structured binding)
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
    // A reference outside rank 0's arena, one from a rank that does not
    // exist, and one without the job's token (these links' token hash is 0).
    l1->send(0, {0x475753484d524546ull, 0, 1, 99, 0, std::uint64_t{1} << 40, 4096}, {});
    l1->send(0, {0x475753484d524546ull, 0, 5, 99, 0, 0, 4096}, {});
    l1->send(0, {0x475753484d524546ull, 0x1234, 1, 99, 0, 0, 4096}, {});
    CHECK(wait_for([&] {
      std::lock_guard<std::mutex> lk(mu);
      return rejected.size() == 3;
    }));
    l0->close(2000);
    l1->close(2000);
  }
  REQUIRE(rejected.size() == 3);
  CHECK_THAT(rejected[0], Catch::Contains("shared-memory reference") && Catch::Contains("in rank 0's memory"));
  CHECK_THAT(rejected[1], Catch::Contains("no such rank"));
  CHECK_THAT(rejected[2], Catch::Contains("without this job's token"));
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

TEST_CASE("UCX link: frames from one thread to one peer arrive in the order sent while other threads hold the link") {
  // A send that finds the link's lock taken is queued; the next send from
  // the same thread may find it free. It must not overtake the queued one:
  // actors' messages between two ranks keep their order (a readmission
  // before the re-form that follows it, say). Another thread polls the
  // link all the while, so the sender often finds the lock taken.
  auto links = connected_pair("posix,cma"); // (not a structured binding: the contender captures l1)
  auto& l0 = links.first;
  auto& l1 = links.second;
  constexpr std::uint64_t frames = 20000;
  std::atomic<std::uint64_t> got{0}, out_of_order{0};
  link::handlers h0;
  h0.receive = [&](const void* hdr, std::size_t, kernels::tensor) {
    std::uint64_t k = 0;
    std::memcpy(&k, hdr, sizeof k);
    if (k != got.load())
      ++out_of_order;
    got = k + 1;
  };
  l0->start(h0);
  l1->start({});
  std::atomic<bool> sending{true};
  std::thread contender([&] {
    while (sending.load())
      l1->poll();
  });
  for (std::uint64_t k = 0; k < frames; ++k)
    l1->send(0, {k}, {});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got.load() < frames && out_of_order.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  sending = false;
  contender.join();
  CHECK(out_of_order == 0);
  CHECK(got == frames);
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

TEST_CASE("UCX link: an arena announced larger than its file is refused, and references into it too") {
  // Rank 1 (no shared memory of its own) announces a 4 KiB segment as
  // 1 GiB, then sends a reference at 512 MiB into it: mapped at the
  // announced size, reading it would be a SIGBUS in rank 0.
  auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 31, true, true, 0, 512, false);
  const std::string name = "/gradwire-" + std::to_string(::getpid()) + "-1-4096"; // named as arenas are
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 4096) == 0);
  ::close(fd);
  std::mutex mu;
  std::vector<std::string> rejected;
  int received = 0;
  link::handlers h0;
  h0.receive = [&](const void*, std::size_t, kernels::tensor) {
    std::lock_guard<std::mutex> lk(mu);
    ++received;
  };
  h0.rejected = [&](const std::string& what) {
    std::lock_guard<std::mutex> lk(mu);
    rejected.push_back(what);
  };
  l0->start(h0);
  l1->start({});
  std::vector<std::uint64_t> ann = {0x475753484d414e4eull, 0, 1, std::uint64_t{1} << 30, name.size()};
  ann.resize(5 + (name.size() + 7) / 8);
  std::memcpy(ann.data() + 5, name.data(), name.size());
  l1->send(0, ann, {});
  l1->send(0, {0x475753484d524546ull, 0, 1, 7, 1, std::uint64_t{512} << 20, 4096, 42}, {});
  l1->send(0, {43}, {}); // and a good frame after them
  for (int i = 0; i < 5000; ++i) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (received == 1 && rejected.size() >= 2)
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::shm_unlink(name.c_str());
  std::lock_guard<std::mutex> lk(mu);
  CHECK(received == 1); // only the good frame
  REQUIRE(rejected.size() == 2); // the announcement, then the reference into what it announced
  CHECK_THAT(rejected[0], Catch::Contains("announced as 1073741824 bytes, the file holds 4096"));
  CHECK_THAT(rejected[1], Catch::Contains("rank 1's memory, which could not be mapped"));
}

TEST_CASE("UCX link: an announcement that names anything but a gradwire arena is refused unopened") {
  auto [l0, l1] = connected_pair("posix,cma", std::size_t{1} << 31, true, true, 0, 512, false);
  std::mutex mu;
  std::vector<std::string> rejected;
  link::handlers h0;
  h0.rejected = [&](const std::string& what) {
    std::lock_guard<std::mutex> lk(mu);
    rejected.push_back(what);
  };
  l0->start(h0);
  l1->start({});
  for (const std::string name : {"/gradwire-../../etc/passwd", "/someone-elses-segment", "/gradwire-1-2-3x"}) {
    std::vector<std::uint64_t> ann = {0x475753484d414e4eull, 0, 1, 4096, name.size()};
    ann.resize(5 + (name.size() + 7) / 8);
    std::memcpy(ann.data() + 5, name.data(), name.size());
    l1->send(0, ann, {});
  }
  for (int i = 0; i < 5000; ++i) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (rejected.size() >= 3)
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard<std::mutex> lk(mu);
  REQUIRE(rejected.size() == 3);
  for (const auto& r : rejected)
    CHECK_THAT(r, Catch::Contains("names no gradwire arena"));
}

TEST_CASE("UCX link: after close no handler runs, even for a send its stalled peer never took") {
  // Rank 0 is driven by polling alone. It takes one frame, which wires the
  // pair up, then stops moving on (a stalled process): rank 1's 4 MiB
  // rendezvous frame is never fetched. Rank 1's close gives up on it; what
  // the link then purges, in close or in its destructor, must not call
  // back into an owner that may already be going away.
  const std::string tls = GENERATE(std::string("posix,cma"), std::string("tcp"));
  INFO("UCX_TLS " << tls);
  auto [l0, l1] = connected_pair(tls, std::size_t{1} << 31, false);
  std::atomic<int> got{0};
  link::handlers h0;
  h0.receive = [&](const void*, std::size_t, kernels::tensor) { got.fetch_add(1); };
  l0->start(h0);
  std::atomic<bool> closed{false};
  std::atomic<int> after_close{0};
  link::handlers h1;
  h1.peer_error = [&](int, const std::string&) {
    if (closed.load())
      after_close.fetch_add(1);
  };
  l1->start(h1);
  l1->send(0, {1}, pattern(16, 1.0f));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got.load() == 0 && std::chrono::steady_clock::now() < until)
    l0->poll();
  REQUIRE(got.load() == 1);
  l1->send(0, {2}, pattern(std::size_t{1} << 20, 2.0f));
  l1->close(200);
  closed = true;
  l1->close(200); // a second close does nothing
  l1.reset();     // the purge of what was never sent
  CHECK(after_close.load() == 0);
  CHECK(got.load() == 1);
  l0->close(200);
}
