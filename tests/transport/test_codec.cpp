// The wire codec: every element type round-trips; bad frames (garbage,
// truncated, zeros, wrong magic or token, data that disagrees with the
// header, over a limit, random bit flips) throw frame_error, never crash.
#include "actor_env.hpp"
#include "actors/messages.hpp"
#include "transport/codec.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>

using namespace gradwire;
using namespace gradwire::transport;

namespace {

frame_context ctx(int rank) {
  frame_context c;
  c.token = token_hash("secret");
  c.rank = rank;
  return c;
}

actors::slice ramp(std::int64_t n, float base) {
  auto t = actors::slice::empty({n});
  for (std::int64_t i = 0; i < n; ++i)
    t.data()[i] = base + static_cast<float>(i);
  return t;
}

} // namespace

TEST_CASE("every element type survives encode and decode") {
  gwtest::actor_env e(1);
  auto a = e.sys->spawn([] { return caf::behavior{[](int) {}}; });
  auto b = e.sys->spawn([] { return caf::behavior{[](int) {}}; });
  actors::pieces ps{{5, ramp(3, 10)}, {100, ramp(4, 20)}};
  auto msg = caf::make_message(actors::ring_atom::value, std::int32_t{-7}, std::int64_t{1} << 40,
                               std::uint64_t{12345678901ull}, 1.5f, 2.25, true, std::string("hello"), ramp(6, 1),
                               a, std::vector<caf::actor>{a, b, caf::actor{}}, ps,
                               std::vector<std::int64_t>{3, -1, 4});
  std::map<caf::actor_addr, actor_ref> refs{{a.address(), {0, 11}}, {b.address(), {1, 12}}};
  auto f = encode(msg, ctx(0), 42, {0, 9}, [&](const caf::actor& x) {
    return x ? refs.at(x.address()) : actor_ref{};
  });
  REQUIRE(f.data.numel() == 3 + 4 + 6); // three tensors packed into one data frame
  std::map<std::pair<int, std::uint32_t>, caf::actor> back{{{0, 11}, a}, {{1, 12}, b}};
  auto d = decode(f.header.data(), f.header.size() * 8, f.data, ctx(1), 0, [&](actor_ref r) {
    return r.rank < 0 ? caf::actor{} : back.at({r.rank, r.slot});
  });
  CHECK(d.src == 0);
  CHECK(d.dst == 42);
  CHECK(d.sender.rank == 0);
  CHECK(d.sender.slot == 9);
  const auto& m = d.msg;
  REQUIRE(m.size() == msg.size());
  CHECK(m.get_as<caf::atom_value>(0) == actors::ring_atom::value);
  CHECK(m.get_as<std::int32_t>(1) == -7);
  CHECK(m.get_as<std::int64_t>(2) == (std::int64_t{1} << 40));
  CHECK(m.get_as<std::uint64_t>(3) == 12345678901ull);
  CHECK(m.get_as<float>(4) == 1.5f);
  CHECK(m.get_as<double>(5) == 2.25);
  CHECK(m.get_as<bool>(6));
  CHECK(m.get_as<std::string>(7) == "hello");
  CHECK(m.get_as<actors::slice>(8).to_vector() == ramp(6, 1).to_vector());
  CHECK(m.get_as<caf::actor>(9) == a);
  const auto& xs = m.get_as<std::vector<caf::actor>>(10);
  REQUIRE(xs.size() == 3);
  CHECK(xs[0] == a);
  CHECK(xs[1] == b);
  CHECK(!xs[2]);
  const auto& got = m.get_as<actors::pieces>(11);
  REQUIRE(got.size() == 2);
  CHECK(got[0].offset == 5);
  CHECK(got[0].data.to_vector() == ramp(3, 10).to_vector());
  CHECK(got[1].offset == 100);
  CHECK(got[1].data.to_vector() == ramp(4, 20).to_vector());
  CHECK(m.get_as<std::vector<std::int64_t>>(12) == std::vector<std::int64_t>{3, -1, 4});
  // The handler signature the ring peers use matches the decoded message.
  bool matched = false;
  caf::message_handler h{[&](actors::ring_atom, int, std::int64_t, std::uint64_t, float, double, bool,
                             const std::string&, const actors::slice&, const caf::actor&,
                             const std::vector<caf::actor>&, const actors::pieces&,
                             const std::vector<std::int64_t>&) { matched = true; }};
  h(const_cast<caf::message&>(m));
  CHECK(matched);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}

TEST_CASE("a single tensor is sent from the sender's own buffer") {
  auto t = ramp(1000, 0);
  auto f = encode(caf::make_message(actors::ring_atom::value, t), ctx(0), 1, {}, [](const caf::actor&) {
    return actor_ref{};
  });
  CHECK(f.data.data() == t.data());
}

TEST_CASE("types without a wire encoding are refused at the sender, by name") {
  auto msg = caf::make_message(std::vector<float>{1.f, 2.f}); // tensors travel as slices, never as vectors
  CHECK_THROWS_WITH(encode(msg, ctx(0), 1, {}, [](const caf::actor&) { return actor_ref{}; }),
                    Catch::Contains("cannot send") && Catch::Contains("across processes"));
}

TEST_CASE("bad frames throw frame_error naming what is wrong") {
  auto good = encode(caf::make_message(actors::ring_atom::value, 3, ramp(8, 0)), ctx(0), 7, {},
                     [](const caf::actor&) { return actor_ref{}; });
  auto none = [](actor_ref) { return caf::actor{}; };
  const std::size_t bytes = good.header.size() * 8;
  auto decode_bytes = [&](const void* h, std::size_t n, const actors::slice& data, frame_context c = ctx(1)) {
    return decode(h, n, data, c, 0, none);
  };
  REQUIRE_NOTHROW(decode_bytes(good.header.data(), bytes, good.data));

  SECTION("truncated header") {
    CHECK_THROWS_AS(decode_bytes(good.header.data(), bytes - 8, good.data), frame_error);
    CHECK_THROWS_WITH(decode_bytes(good.header.data(), bytes - 3, good.data), Catch::Contains("whole number of words"));
  }
  SECTION("empty and zero headers") {
    CHECK_THROWS_AS(decode_bytes(good.header.data(), 0, good.data), frame_error);
    std::vector<std::uint64_t> zeros(good.header.size(), 0);
    CHECK_THROWS_AS(decode_bytes(zeros.data(), bytes, good.data), frame_error);
  }
  SECTION("garbage") {
    std::vector<std::uint64_t> junk(64);
    std::mt19937_64 rng(1);
    for (auto& w : junk)
      w = rng();
    CHECK_THROWS_AS(decode_bytes(junk.data(), junk.size() * 8, good.data), frame_error);
  }
  SECTION("wrong token") {
    auto other = ctx(1);
    other.token = token_hash("not the secret");
    CHECK_THROWS_WITH(decode_bytes(good.header.data(), bytes, good.data, other), Catch::Contains("wrong job token"));
  }
  SECTION("data frame that disagrees with the header") {
    CHECK_THROWS_WITH(decode_bytes(good.header.data(), bytes, ramp(7, 0)), Catch::Contains("announces 8 floats"));
    CHECK_THROWS_AS(decode_bytes(good.header.data(), bytes, actors::slice{}), frame_error);
  }
  SECTION("over the header limit") {
    auto small = ctx(1);
    small.limits.max_header_bytes = 16;
    CHECK_THROWS_WITH(decode_bytes(good.header.data(), bytes, good.data, small), Catch::Contains("over the limit"));
  }
  SECTION("random bit flips never crash") {
    std::mt19937 rng(7);
    int rejected = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      auto h = good.header;
      auto* b = reinterpret_cast<unsigned char*>(h.data());
      for (int k = 0; k < 3; ++k)
        b[rng() % bytes] ^= static_cast<unsigned char>(1u << (rng() % 8));
      try {
        (void)decode_bytes(h.data(), bytes, good.data);
      } catch (const frame_error&) {
        ++rejected;
      }
    }
    CHECK(rejected > 0);
  }
}

TEST_CASE("worker reports and step metrics cross with their replica") {
  actors::worker_report r;
  r.rank = 3;
  r.steps = 40;
  r.samples = 2560;
  r.seconds = 1.5;
  r.last_loss = 0.25;
  r.staleness = {0, 1, 2};
  r.dropped = 4;
  r.wait_seconds = 0.1;
  r.params = ramp(10, 3);
  r.state = ramp(4, 7); // BatchNorm statistics
  r.error = "boom";
  r.batches = {64, 60, 71};
  r.step_compute_ms = {1.5f, 0.25f};
  r.compress_error_sum = 3.5;
  r.compressed_steps = 7;
  actors::step_metrics m;
  m.rank = 2;
  m.step = 50;
  m.loss = 0.5;
  m.wait_ms = 0.75;
  m.compress_error = 0.125;
  auto f = encode(caf::make_message(actors::done_atom::value, r, m), ctx(1), 2, {}, [](const caf::actor&) {
    return actor_ref{};
  });
  auto d = decode(f.header.data(), f.header.size() * 8, f.data, ctx(0), 1, [](actor_ref) { return caf::actor{}; });
  const auto& r2 = d.msg.get_as<actors::worker_report>(1);
  CHECK(r2.rank == 3);
  CHECK(r2.steps == 40);
  CHECK(r2.samples == 2560);
  CHECK(r2.seconds == 1.5);
  CHECK(r2.last_loss == 0.25);
  CHECK(r2.staleness == std::vector<std::int64_t>{0, 1, 2});
  CHECK(r2.dropped == 4);
  CHECK(r2.wait_seconds == 0.1);
  CHECK(r2.params.to_vector() == ramp(10, 3).to_vector());
  CHECK(r2.state.to_vector() == ramp(4, 7).to_vector());
  CHECK(r2.error == "boom");
  CHECK(r2.batches == std::vector<int>{64, 60, 71});
  CHECK(r2.step_compute_ms == std::vector<float>{1.5f, 0.25f});
  CHECK(r2.compress_error_sum == 3.5);
  CHECK(r2.compressed_steps == 7);
  const auto& m2 = d.msg.get_as<actors::step_metrics>(2);
  CHECK(m2.rank == 2);
  CHECK(m2.step == 50);
  CHECK(m2.loss == 0.5);
  CHECK(m2.wait_ms == 0.75);
  CHECK(m2.compress_error == 0.125);
}

TEST_CASE("token hashes differ for different tokens") {
  CHECK(token_hash("a") != token_hash("b"));
  CHECK(token_hash("") != token_hash("x"));
  CHECK(token_hash("job-42") == token_hash("job-42"));
}
