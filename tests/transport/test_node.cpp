// Remote actor proxies over the in-process link (each rank its own actor
// system, frames copied as a wire would): the ring peers of actors/ give
// exact sums across "processes"; bad frames are refused and counted while
// good traffic goes on; a dead or silent peer is reported by rank.
#include "actor_env.hpp"
#include "actors/messages.hpp"
#include "actors/ring_allreduce.hpp"
#include "actors/ring_peer.hpp"
#include "transport/codec.hpp"
#include "transport/buffer_pool.hpp"
#include "transport/emulated_link.hpp"
#include "transport/inproc_link.hpp"
#include "transport/node.hpp"

#include <catch2/catch.hpp>

#include <set>

#include <future>

using namespace gradwire;
using namespace gradwire::transport;

namespace {

/// Slots these tests publish in (transport/slots.hpp: free for tests).
constexpr std::uint32_t ring_slot = slots::user(0), sink_slot = slots::user(1), shard_slot = slots::user(2),
                        empty_slot = slots::user(3);

/// N ranks, each with its own actor system and node over an inproc link.
struct job_of_threads {
  std::vector<std::unique_ptr<gwtest::actor_env>> envs;
  std::vector<caf::actor_system*> systems;
  std::vector<std::shared_ptr<node>> nodes;
  std::vector<inproc_link*> links;
  explicit job_of_threads(int n) {
    auto group = inproc_link::make_group(n);
    for (int r = 0; r < n; ++r) {
      envs.push_back(std::make_unique<gwtest::actor_env>(1));
      systems.push_back(envs.back()->sys.get());
      links.push_back(group[static_cast<std::size_t>(r)].get());
      nodes.push_back(std::make_shared<node>(*systems.back(), std::move(group[static_cast<std::size_t>(r)]), "tok"));
    }
  }
  ~job_of_threads() {
    for (auto& n : nodes)
      n->close(1000);
    nodes.clear();
    systems.clear();
    envs.clear();
  }
};

/// Rank r's input: (r + 1) * (i mod 13 + 1); the sum is n(n+1)/2 * (i mod 13 + 1).
actors::slice node_input(int r, std::size_t len) {
  auto t = actors::slice::empty({static_cast<std::int64_t>(len)});
  for (std::size_t i = 0; i < len; ++i)
    t.data()[i] = static_cast<float>(r + 1) * static_cast<float>(i % 13 + 1);
  return t;
}

} // namespace

TEST_CASE("ring allreduce across nodes: exact sums for N = 1..5, multi-chunk, two rounds") {
  for (int n = 1; n <= 5; ++n) {
    const std::size_t len = 1003; // not divisible by N
    INFO("N = " << n);
    job_of_threads job(n);
    const auto buckets = actors::make_buckets(len, 400); // 3 buckets
    std::vector<caf::actor> peers;
    for (int r = 0; r < n; ++r) {
      actors::ring_peer_config pc;
      pc.rank = r;
      pc.world = n;
      pc.buckets = buckets;
      pc.chunk_floats = 37; // many chunks per segment
      peers.push_back(actors::spawn_ring_peer(*job.systems[static_cast<std::size_t>(r)], pc));
      job.nodes[static_cast<std::size_t>(r)]->publish(ring_slot, peers.back());
    }
    for (auto& nd : job.nodes)
      nd->start();
    for (int r = 0; r < n; ++r)
      caf::anon_send(peers[static_cast<std::size_t>(r)], actors::peer_wire_atom::value,
                     job.nodes[static_cast<std::size_t>(r)]->remote((r + 1) % n, ring_slot), caf::actor{},
                     std::vector<caf::actor>{});
    for (std::int64_t round = 0; round < 2; ++round) {
      std::vector<std::future<double>> errs;
      for (int r = 0; r < n; ++r) {
        auto done = std::make_shared<std::promise<double>>();
        errs.push_back(done->get_future());
        auto& sys = *job.systems[static_cast<std::size_t>(r)];
        sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
          auto buf = node_input(r, len);
          auto left = std::make_shared<int>(static_cast<int>(buckets.size()));
          auto worst = std::make_shared<double>(0);
          for (std::size_t b = 0; b < buckets.size(); ++b)
            self->send(peers[static_cast<std::size_t>(r)], actors::reduce_atom::value, round, static_cast<int>(b),
                       buf.view(buckets[b].first, {static_cast<std::int64_t>(buckets[b].second - buckets[b].first)}),
                       1.f);
          return {
            [=](actors::reduced_atom, std::int64_t, int, const actors::pieces& ps, double) {
              for (const auto& p : ps)
                for (std::int64_t k = 0; k < p.data.numel(); ++k) {
                  const auto i = p.offset + static_cast<std::size_t>(k);
                  const float want = static_cast<float>(n * (n + 1) / 2) * static_cast<float>(i % 13 + 1);
                  *worst = std::max<double>(*worst, std::fabs(p.data.data()[k] - want));
                }
              if (--*left == 0) {
                done->set_value(*worst);
                self->quit();
              }
            },
            [=](actors::reduce_failed_atom, std::int64_t, const std::string& err) {
              done->set_exception(std::make_exception_ptr(std::runtime_error(err)));
              self->quit();
            },
          };
        });
      }
      for (auto& f : errs) {
        REQUIRE(f.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
        CHECK(f.get() == 0.0);
      }
    }
    for (auto& nd : job.nodes)
      CHECK(nd->rejected() == 0);
    for (int r = 0; r < n; ++r)
      caf::anon_send_exit(peers[static_cast<std::size_t>(r)], caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("bad frames are refused and counted, the next good frame is delivered") {
  job_of_threads job(2);
  std::promise<int> got;
  auto sink = job.systems[1]->spawn([&got](caf::event_based_actor* self) -> caf::behavior {
    return {[&got, self](actors::step_atom, int x) {
      got.set_value(x);
      self->quit();
    }};
  });
  job.nodes[1]->publish(sink_slot, sink);
  for (auto& nd : job.nodes)
    nd->start();
  auto* victim = job.links[1];
  std::vector<std::uint64_t> junk{0x1234, 0xdeadbeef, 0, 42};
  victim->inject(junk.data(), junk.size() * 8, {});                   // garbage
  victim->inject(junk.data(), 5, {});                                 // truncated
  frame_context other;
  other.token = token_hash("other job");
  other.rank = 0;
  auto f = encode(caf::make_message(actors::step_atom::value, 1), other, sink_slot, {}, [](const caf::actor&) {
    return actor_ref{};
  });
  victim->inject(f.header.data(), f.header.size() * 8, {});
  frame_context mine;
  mine.token = token_hash("tok");
  mine.rank = 0;
  auto to_nowhere = encode(caf::make_message(actors::step_atom::value, 2), mine, empty_slot, {}, [](const caf::actor&) {
    return actor_ref{};
  });
  victim->inject(to_nowhere.header.data(), to_nowhere.header.size() * 8, {}); // nothing in that slot
  caf::anon_send(job.nodes[0]->remote(1, sink_slot), actors::step_atom::value, 77);   // and a good one
  auto fut = got.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(fut.get() == 77);
  CHECK(job.nodes[1]->rejected() == 4);
}

TEST_CASE("a failed peer is reported once, by rank, a silent one after the liveness timeout") {
  SECTION("the link reports it") {
    job_of_threads job(3);
    std::promise<int> down;
    job.nodes[0]->start([&](int r, const std::string&) { down.set_value(r); });
    job.nodes[1]->start();
    job.nodes[2]->start();
    job.links[0]->kill_peer(2);
    auto fut = down.get_future();
    REQUIRE(fut.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    CHECK(fut.get() == 2);
  }
  SECTION("heartbeats stop") {
    job_of_threads job(2);
    std::promise<std::string> down;
    liveness live;
    live.heartbeat_ms = 50;
    live.peer_timeout_ms = 400;
    job.nodes[0]->start([&](int r, const std::string& what) { down.set_value(std::to_string(r) + ": " + what); },
                        live);
    // rank 1 never starts: no heartbeats, as a process that hangs or died
    auto fut = down.get_future();
    REQUIRE(fut.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    CHECK_THAT(fut.get(), Catch::StartsWith("1: no frame for"));
  }
  SECTION("live peers are not reported") {
    job_of_threads job(2);
    std::atomic<int> downs{0};
    liveness live;
    live.heartbeat_ms = 50;
    live.peer_timeout_ms = 400;
    job.nodes[0]->start([&](int, const std::string&) { ++downs; }, live);
    job.nodes[1]->start({}, live);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    CHECK(downs == 0);
  }
}

TEST_CASE("requests cross processes: replies, error replies, and a failed peer's open requests") {
  job_of_threads job(2);
  auto shard = job.systems[1]->spawn([](caf::event_based_actor* self) -> caf::behavior {
    auto held = std::make_shared<std::vector<caf::response_promise>>();
    return {
      [](actors::pull_atom, int rank, std::int64_t v) {
        return caf::make_message(v + rank, actors::slice::zeros({5}), 0.5);
      },
      [](actors::push_atom, int) -> caf::result<std::int64_t> {
        return caf::make_error(caf::sec::runtime_error, "push refused");
      },
      [self, held](actors::fetch_atom) { // never answered: held until the peer fails
        held->push_back(self->make_response_promise());
        return caf::delegated<std::int64_t>{};
      },
    };
  });
  job.nodes[1]->publish(shard_slot, shard);
  for (auto& nd : job.nodes)
    nd->start();
  auto remote = job.nodes[0]->remote(1, shard_slot);
  caf::scoped_actor me{*job.systems[0]};
  std::int64_t version = -1;
  std::int64_t numel = 0;
  me->request(remote, std::chrono::seconds(10), actors::pull_atom::value, 3, std::int64_t{39})
    .receive([&](std::int64_t v, const actors::slice& s, double) { version = v; numel = s.numel(); },
             [&](caf::error& e) { FAIL("pull failed: " << job.systems[0]->render(e)); });
  CHECK(version == 42);
  CHECK(numel == 5);
  std::string err;
  me->request(remote, std::chrono::seconds(10), actors::push_atom::value, 1)
    .receive([&](std::int64_t) { FAIL("push should fail"); }, [&](caf::error& e) { err = job.systems[0]->render(e); });
  CHECK_THAT(err, Catch::Contains("push refused") && Catch::Contains("rank 1"));
  // An open request fails as soon as its rank is known to be gone.
  std::atomic<bool> failed{false};
  std::string why;
  auto asker = job.systems[0]->spawn([&, remote](caf::event_based_actor* self) {
    self->request(remote, std::chrono::seconds(30), actors::fetch_atom::value)
      .then([](std::int64_t) {}, [&](caf::error& e) {
        why = job.systems[0]->render(e);
        failed = true;
      });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  job.links[0]->kill_peer(1);
  for (int i = 0; i < 100 && !failed; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(failed);
  CHECK_THAT(why, Catch::Contains("rank 1 is gone"));
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
}

TEST_CASE("link emulation delays frames by latency and size, keeps their order and content") {
  auto group = inproc_link::make_group(2);
  link_shape shape;
  shape.latency_us = 30000;    // 30 ms one way
  shape.bandwidth_gbps = 0.08; // 10 MB/s: 400 KB take 40 ms on the wire
  auto slow = emulate(std::move(group[0]), shape);
  std::mutex mu;
  std::vector<std::pair<std::uint64_t, std::chrono::steady_clock::time_point>> got;
  std::promise<void> all;
  link::handlers h;
  h.receive = [&](const void* hdr, std::size_t, kernels::tensor data) {
    std::uint64_t k = 0;
    std::memcpy(&k, hdr, 8);
    std::lock_guard<std::mutex> lk(mu);
    CHECK(data.numel() == 100000);
    CHECK(data.data()[99999] == static_cast<float>(k));
    got.emplace_back(k, std::chrono::steady_clock::now());
    if (got.size() == 3)
      all.set_value();
  };
  group[1]->start(h);
  slow->start({});
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t k = 0; k < 3; ++k) {
    auto t = kernels::tensor::zeros({100000}); // 400 KB
    t.data()[99999] = static_cast<float>(k);
    slow->send(1, {k}, t);
  }
  REQUIRE(all.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  for (std::uint64_t k = 0; k < 3; ++k) {
    CHECK(got[k].first == k); // in order
    // The emulated delay is enforced, so it is a lower bound (no upper bound is checked).
    const double ms = std::chrono::duration<double, std::milli>(got[k].second - t0).count();
    CHECK(ms >= 30 + 40 * (k + 1) - 1);
  }
  slow->close(1000);
  group[1]->close(1000);
}

TEST_CASE("receive buffers return to the pool and are reused, they outlive a closed pool") {
  auto pool = std::make_shared<buffer_pool>(2);
  const float* first = nullptr;
  {
    auto a = pool->get(1000), b = pool->get(1000), c = pool->get(3000);
    first = a.data();
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
    CHECK(pool->free_count() == 0);
  }
  CHECK(pool->free_count() == 3); // a and b in one bin (kept: at most 2 per bin), c in another
  auto again = pool->get(900);    // same bin as a and b
  CHECK(pool->free_count() == 2);
  CHECK(again.data() == first);    // the last one returned (a: destroyed after b) comes back first
  auto view = again.view(10, {5}); // a view keeps the buffer out of the pool
  again = kernels::tensor{};
  CHECK(pool->free_count() == 2);
  pool.reset(); // the pool goes first: the last view frees its buffer itself
  view.data()[0] = 1.f;
}

TEST_CASE("reserved slots are distinct and bounded, and the message table says which payloads may be lent") {
  // Every named slot, and the first and last of each indexed range, is below
  // the free range and distinct.
  std::set<std::uint32_t> seen{slots::heartbeat, slots::barrier, slots::coordinator, slots::worker, slots::ring_peer};
  for (int i : {0, static_cast<int>(slots::max_indexed) - 1}) {
    seen.insert(slots::shard(i));
    seen.insert(slots::bench_peer(i));
  }
  CHECK(seen.size() == 9);
  CHECK(*seen.rbegin() < slots::user_base);
  CHECK(slots::user(0) < slots::dynamic_base);
  CHECK_THROWS(slots::shard(static_cast<int>(slots::max_indexed)));
  CHECK_THROWS(slots::bench_peer(-1));
  // Lent: a fresh gradient, a ring chunk, a snapshot; never a pull or a report.
  CHECK(actors::travels_by_reference(actors::push_atom::value));
  CHECK(actors::travels_by_reference(actors::push_pull_atom::value));
  CHECK(actors::travels_by_reference(actors::ring_atom::value));
  CHECK(actors::travels_by_reference(actors::gossip_atom::value));
  CHECK_FALSE(actors::travels_by_reference(actors::pull_atom::value));
  CHECK_FALSE(actors::travels_by_reference(actors::done_atom::value));
  CHECK_FALSE(actors::travels_by_reference(actors::reduce_atom::value));
  CHECK_FALSE(actors::travels_by_reference(caf::atom("other")));
}

TEST_CASE("a peer whose frames pile up past its memory budget is cut off, and what it held is given back") {
  job_of_threads job(2);
  constexpr std::size_t frame_floats = 64 << 10; // 256 KiB a frame
  job.nodes[1]->set_peer_budget(std::size_t{1} << 20); // 4 frames' worth
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> handled{0};
  // Busy with the first frame until released: the others queue in its mailbox.
  auto sink = job.systems[1]->spawn<caf::detached>([&handled, released](caf::event_based_actor*) -> caf::behavior {
    return {[&handled, released](actors::step_atom, const actors::slice&) {
      released.wait();
      ++handled;
    }};
  });
  job.nodes[1]->publish(sink_slot, sink);
  std::promise<std::string> down;
  job.nodes[1]->start([&down](int r, const std::string& what) { down.set_value(std::to_string(r) + ": " + what); });
  job.nodes[0]->start();
  auto remote = job.nodes[0]->remote(1, sink_slot);
  for (int i = 0; i < 8; ++i)
    caf::anon_send(remote, actors::step_atom::value, actors::slice::zeros({static_cast<std::int64_t>(frame_floats)}));
  auto fut = down.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const auto what = fut.get();
  CHECK_THAT(what, Catch::StartsWith("0: cut off: its frames hold 1280 KiB here that no actor has handled yet"));
  CHECK_THAT(what, Catch::Contains("budget of 1024 KiB per peer"));
  release.set_value();
  // The four frames taken in are handled; the fifth and later are dropped.
  for (int i = 0; i < 1000 && (handled < 4 || job.nodes[1]->held_bytes(0) != 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(handled == 4);
  CHECK(job.nodes[1]->held_bytes(0) == 0);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST_CASE("a request to a rank already down fails with that word instead of waiting out its timeout") {
  job_of_threads job(2);
  for (auto& nd : job.nodes)
    nd->start({}, liveness{50, 60000});
  job.nodes[0]->cut_off(1, "the test"); // down here from now on
  caf::scoped_actor self{*job.systems[0]};
  std::string why;
  self->request(job.nodes[0]->remote(1, sink_slot), std::chrono::seconds(60), actors::stats_atom::value)
    .receive([&](std::int64_t) { why = "answered"; }, [&](caf::error& e) { why = self->system().render(e); });
  CHECK_THAT(why, Catch::Contains("rank 1 is gone")); // not a request_timeout after 60 s
}

TEST_CASE("a rank cut off while alive knocks and is let back in: each side hears the other again") {
  job_of_threads job(3);
  std::atomic<int> knocked{-1};
  std::atomic<bool> back{false};
  job.nodes[0]->rejoin().set_on_knock([&](int r) { knocked = r; });
  job.nodes[2]->rejoin().set_on_readmitted([&] { back = true; });
  for (auto& nd : job.nodes)
    nd->start({}, liveness{50, 60000});
  job.nodes[0]->cut_off(2, "the test");        // rank 0 gives up on rank 2 (and fences it)
  for (int i = 0; i < 200 && !job.nodes[2]->is_down(0); ++i) // the fence arrives
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(job.nodes[2]->is_down(0));
  for (int i = 0; i < 200 && knocked.load() < 0; ++i) {
    job.nodes[2]->rejoin().knock(); // heard by rank 0 although it is cut off
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(knocked.load() == 2);
  job.nodes[0]->rejoin().readmit_everywhere(2);
  for (int i = 0; i < 200 && !back.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(back.load());
  CHECK_FALSE(job.nodes[0]->is_down(2));
  CHECK_FALSE(job.nodes[2]->is_down(0));
  knocked = -1;
  job.nodes[2]->rejoin().knock(); // no longer cut off: a knock is no news
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(knocked.load() == -1);
}
