// Injected faults ([[faults]]): the schedule every process draws alike
// from the seed, the links each process impairs for a strike, and the
// emulated link under link faults: frames delayed or held while a link is
// down, in order, and dropped once the job gives up on their peer.
#include "scheduler/runtime/coordinator_state.hpp"
#include "scheduler/runtime/faults.hpp"
#include "scheduler/runtime/reform_decision.hpp"
#include "transport/emulated_link.hpp"
#include "transport/inproc_link.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>

using namespace gradwire;
using namespace gradwire::scheduler;
using namespace gradwire::transport;

namespace {

fault_spec mtbf(fault_kind k, double mean) {
  fault_spec f;
  f.kind = k;
  f.mtbf_s = mean;
  f.seconds = 1;
  return f;
}

/// A fault striking `rank` after its step `step`, lasting `seconds`.
fault_spec after(fault_kind k, int rank, std::int64_t step, double seconds) {
  fault_spec f;
  f.kind = k;
  f.rank = rank;
  f.at_step = step;
  f.seconds = seconds;
  return f;
}

/// Frames a rank of an inproc group receives, as (first header word) in arrival order.
struct inbox {
  std::mutex mu;
  std::vector<std::uint64_t> got;
  std::promise<void> first_of;
  std::uint64_t wanted = ~0ULL;
  link::handlers handlers() {
    link::handlers h;
    h.receive = [this](const void* hdr, std::size_t, kernels::tensor) {
      std::uint64_t k = 0;
      std::memcpy(&k, hdr, 8);
      std::lock_guard<std::mutex> lk(mu);
      got.push_back(k);
      if (k == wanted)
        first_of.set_value();
    };
    return h;
  }
  void expect(std::uint64_t k) { wanted = k; }
  bool wait(int seconds) {
    return first_of.get_future().wait_for(std::chrono::seconds(seconds)) == std::future_status::ready;
  }
  std::vector<std::uint64_t> seen() {
    std::lock_guard<std::mutex> lk(mu);
    return got;
  }
};

/// Rank 0's link of an inproc group of `n`, wrapped with link faults; the
/// group's links are closed at the end.
struct faulty_links {
  std::vector<std::unique_ptr<inproc_link>> group;
  std::shared_ptr<link_faults> faults = std::make_shared<link_faults>();
  std::unique_ptr<link> l0;
  explicit faulty_links(int n) : group(inproc_link::make_group(n)) {
    link_shape shape;
    shape.faults = faults;
    l0 = emulate(std::move(group[0]), shape);
  }
  ~faulty_links() {
    l0->close(1000);
    for (std::size_t r = 1; r < group.size(); ++r)
      group[r]->close(1000);
  }
};

} // namespace

TEST_CASE("the fault schedule is the same for the same seed and strikes no rank twice with kill") {
  std::vector<fault_spec> specs{mtbf(fault_kind::kill, 5.0), mtbf(fault_kind::stall, 3.0)};
  const auto a = fault_schedule(specs, 6, 42), b = fault_schedule(specs, 6, 42), c = fault_schedule(specs, 6, 43);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].ranks == b[i].ranks);
    CHECK(a[i].at_seconds == b[i].at_seconds);
  }
  bool differs = a.size() != c.size();
  for (std::size_t i = 0; !differs && i < a.size(); ++i)
    differs = a[i].at_seconds != c[i].at_seconds;
  CHECK(differs); // another seed, other times
  std::set<int> killed;
  double last = 0;
  int kills = 0, stalls = 0;
  for (const auto& s : a) {
    REQUIRE(s.ranks.size() == 1);
    CHECK(s.ranks[0] >= 1); // rank 0 (the coordinator) only when named
    CHECK(s.ranks[0] < 6);
    CHECK(s.at_step == 0);
    if (s.kind == fault_kind::kill) {
      CHECK(killed.insert(s.ranks[0]).second);
      CHECK(s.at_seconds > last); // strikes at growing times
      last = s.at_seconds;
      ++kills;
    } else
      ++stalls;
  }
  CHECK(kills == 5); // every rank but 0, then no candidate is left
  CHECK(stalls == max_strikes_per_entry);
  // A kill named by step is one strike, and a later mtbf kill spares its rank.
  fault_spec k;
  k.rank = 2;
  k.at_step = 10;
  const auto d = fault_schedule({k, mtbf(fault_kind::kill, 1.0)}, 3, 7);
  REQUIRE(d.size() == 2);
  CHECK(d[0].at_step == 10);
  CHECK(d[0].ranks == std::vector<int>{2});
  CHECK(d[1].ranks == std::vector<int>{1});
}

TEST_CASE("each process impairs the links a strike names: a partition from both sides and a drop at both ends") {
  fault_spec p;
  p.kind = fault_kind::partition;
  p.ranks = {2, 3};
  p.at_step = 5;
  p.seconds = 600;
  fault_spec d;
  d.kind = fault_kind::drop;
  d.rank = 0;
  d.peer = 1;
  d.at_step = 7;
  d.seconds = 600;
  const auto schedule = fault_schedule({p, d}, 4, 1);
  auto cut_from = [&](int rank, std::int64_t steps) {
    auto links = std::make_shared<link_faults>();
    fault_injector inj(schedule, rank, 4, links);
    for (std::int64_t s = 1; s <= steps; ++s)
      inj.after_step(s);
    std::set<int> out;
    const auto now = link_faults::clock_type::now();
    for (int r = 0; r < 4; ++r)
      if (r != rank && !links->quiet(r, now))
        out.insert(r);
    return out;
  };
  CHECK(cut_from(0, 4).empty()); // nothing before its step
  CHECK(cut_from(0, 5) == std::set<int>{2, 3});
  CHECK(cut_from(1, 5) == std::set<int>{2, 3});
  CHECK(cut_from(2, 5) == std::set<int>{0, 1});
  CHECK(cut_from(3, 5) == std::set<int>{0, 1});
  CHECK(cut_from(0, 7) == std::set<int>{1, 2, 3}); // and the drop of 0 -- 1
  CHECK(cut_from(1, 7) == std::set<int>{0, 2, 3});
  CHECK(cut_from(2, 7) == std::set<int>{0, 1});
}

TEST_CASE("a slow strike multiplies compute for its window only and while it lasts") {
  auto s = after(fault_kind::slow, 1, 3, 600);
  s.factor = 4;
  fault_injector mine(fault_schedule({s}, 2, 1), 1, 2, nullptr), other(fault_schedule({s}, 2, 1), 0, 2, nullptr);
  mine.after_step(2);
  CHECK(mine.slowdown_now() == 1.0);
  mine.after_step(3);
  other.after_step(3);
  CHECK(mine.slowdown_now() == 4.0);
  CHECK(other.slowdown_now() == 1.0);
  // Real time: 10 ms of work inside the 600 s spell take 40 ms; 10 ms
  // begun an hour ago (before the spell) took what it takes.
  CHECK(mine.slowed(0.01, 0) == Approx(0.04));
  CHECK(other.slowed(0.01, 0) == 0.01);
  CHECK(mine.slowed(0.01, 3600) == 0.01);
  // A spell of 0.5 s at 4000 times: 1 ms of work lets 0.125 ms through
  // while it lasts, then runs the rest at full speed: 0.5 s + 0.875 ms, not
  // 4 s (the whole step at the factor once held a worker for over a minute).
  s.factor = 4000;
  s.seconds = 0.5;
  fault_injector brief(fault_schedule({s}, 2, 1), 1, 2, nullptr);
  brief.after_step(3);
  CHECK(brief.slowed(0.001, 0) == Approx(0.500875).margin(0.01));
  CHECK(brief.slowed(0.0001, 0) == Approx(0.4).margin(1e-9)); // all of it inside the spell
  // Work begun 0.25 s before the spell: 0.25 s at full speed, the whole
  // spell, then the rest: 0.25 + 0.5 + (0.05 - 0.000125).
  CHECK(brief.slowed(0.3, 0.25) == Approx(0.799875).margin(1e-6));
}

TEST_CASE("a link that is down holds frames until it is back and delivers them in order") {
  faulty_links job(3);
  auto& group = job.group;
  auto& faults = job.faults;
  auto& l0 = job.l0;
  inbox at1, at2;
  at1.expect(3);
  at2.expect(7);
  group[1]->start(at1.handlers());
  group[2]->start(at2.handlers());
  l0->start({});
  const auto t0 = link_faults::clock_type::now();
  faults->impair({1}, 1.0, 0, true);
  const auto until = t0 + std::chrono::seconds(1);
  for (std::uint64_t k = 0; k < 3; ++k)
    l0->send(1, {k}, kernels::tensor::zeros({16}));
  l0->send(2, {7}, kernels::tensor::zeros({16})); // another link: not held
  REQUIRE(at2.wait(10));
  if (link_faults::clock_type::now() < until) // (a machine slower than the window proves nothing here)
    CHECK(at1.seen().empty());
  while (link_faults::clock_type::now() < until + std::chrono::milliseconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  l0->send(1, {3}, kernels::tensor::zeros({16})); // after the window: behind the held ones
  REQUIRE(at1.wait(10));
  CHECK(at1.seen() == std::vector<std::uint64_t>{0, 1, 2, 3});
}

TEST_CASE("frames held for a peer the job gave up on are dropped and later ones go") {
  faulty_links job(2);
  auto& group = job.group;
  auto& faults = job.faults;
  auto& l0 = job.l0;
  inbox at1;
  at1.expect(9);
  group[1]->start(at1.handlers());
  l0->start({});
  faults->impair({1}, 0.3, 0, true);
  l0->send(1, {0}, kernels::tensor::zeros({16}));
  l0->send(1, {1}, {});
  l0->forget(1);
  while (!faults->quiet(1, link_faults::clock_type::now()))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  l0->send(1, {9}, kernels::tensor::zeros({16}));
  REQUIRE(at1.wait(10));
  CHECK(at1.seen() == std::vector<std::uint64_t>{9});
}

TEST_CASE("a delayed link adds its delay and keeps order with frames sent after the window") {
  faulty_links job(2);
  auto& group = job.group;
  auto& faults = job.faults;
  auto& l0 = job.l0;
  inbox at1;
  at1.expect(1);
  std::chrono::steady_clock::time_point first_at{};
  auto h = at1.handlers();
  auto inner = h.receive;
  h.receive = [&](const void* hdr, std::size_t n, kernels::tensor d) {
    if (first_at == std::chrono::steady_clock::time_point{})
      first_at = std::chrono::steady_clock::now();
    inner(hdr, n, std::move(d));
  };
  group[1]->start(h);
  l0->start({});
  faults->impair({1}, 0.05, 200, false); // 200 ms on frames sent in the next 50 ms
  const auto t0 = std::chrono::steady_clock::now();
  l0->send(1, {0}, kernels::tensor::zeros({16}));
  while (!faults->quiet(1, link_faults::clock_type::now()))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  l0->send(1, {1}, kernels::tensor::zeros({16})); // undelayed, yet not before frame 0
  REQUIRE(at1.wait(10));
  CHECK(at1.seen() == std::vector<std::uint64_t>{0, 1});
  CHECK(std::chrono::duration<double, std::milli>(first_at - t0).count() >= 199); // enforced: a lower bound
}

TEST_CASE("a silent worker's error says when it was last heard or that it never was") {
  const detail::coordinator_state::progress_fn progress;
  const detail::coordinator_state::metrics_fn metrics;
  const detail::coordinator_state::eval_fn eval;
  auto silent_after = [](detail::coordinator_state& st) {
    while (!st.any_silent()) // a 1 ms timeout: a few loops
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    st.check_silence();
    return st.out.failure;
  };
  detail::coordinator_state never(2, std::chrono::milliseconds(1), progress, metrics, eval, false);
  const auto first = silent_after(never);
  CHECK_THAT(first, Catch::Contains("worker rank 0 silent for 1 ms") &&
                        Catch::Contains("nothing heard from it since the run began") &&
                        !Catch::Contains("last heard"));
  detail::coordinator_state heard(2, std::chrono::milliseconds(1), progress, metrics, eval, false);
  heard.finished[0] = true;
  heard.on_step(1, 7, 448);
  heard.on_step(9, 8, 512); // no such rank: ignored
  const auto second = silent_after(heard);
  CHECK_THAT(second, Catch::Contains("worker rank 1 silent for 1 ms (last heard at step 7; train.step_timeout_s)"));
}

namespace {
/// A virtual clock that only counts what stalls charge it.
struct stall_counter : actors::virtual_clock {
  double charged = 0;
  time_point now() const override { return time_point{}; }
  double charge_compute(int, std::int64_t, double, double, double) override { return 0; }
  void note_eval(std::int64_t, double) override {}
  caf::actor place_beside(int, const caf::actor& a) override { return a; }
  void charge(double seconds) override { charged += seconds; }
  void charge_apply(std::int64_t) override {}
  void note_progress(int, std::int64_t) override {}
  void offload(std::function<void()> work) override { work(); }
  void lose_worker(int) override {}
  void impair_links(int, const std::vector<int>&, double, double, bool) override {}
  void suspend_host(int, double) override {}
};
} // namespace

TEST_CASE("a mid_step strike waits for the next step's computation") {
  auto s = after(fault_kind::stall, 1, 3, 2);
  auto plain = s;
  s.mid_step = true;
  const auto strikes = fault_schedule({s, plain}, 2, 1);
  REQUIRE(strikes.size() == 2);
  CHECK(strikes[0].mid_step);
  CHECK_FALSE(strikes[1].mid_step);
  auto clock = std::make_shared<stall_counter>();
  fault_injector mine(strikes, 1, 2, nullptr, clock);
  mine.in_step(); // nothing due yet
  mine.after_step(2);
  mine.in_step();
  CHECK(clock->charged == 0);
  mine.after_step(3); // the plain one lands here, the mid_step one waits
  CHECK(clock->charged == 2);
  mine.in_step();
  CHECK(clock->charged == 4);
  mine.in_step(); // once
  mine.after_step(4);
  mine.in_step();
  CHECK(clock->charged == 4);
}

TEST_CASE("stop_actors waits 60 s for a handler or twice the step timeout where longer") {
  set_stop_limit(std::chrono::seconds(2));
  CHECK(stop_limit() == std::chrono::seconds(60));
  set_stop_limit(std::chrono::seconds(300)); // steps that may take minutes are let finish one
  CHECK(stop_limit() == std::chrono::seconds(600));
  set_stop_limit(std::chrono::seconds(30));
  CHECK(stop_limit() == std::chrono::seconds(60));
  // train.stop_wait_s, still at least twice the step timeout.
  set_stop_limit(std::chrono::seconds(2), std::chrono::seconds(5));
  CHECK(stop_limit() == std::chrono::seconds(5));
  set_stop_limit(std::chrono::seconds(30), std::chrono::seconds(5));
  CHECK(stop_limit() == std::chrono::seconds(60));
  set_stop_limit(std::chrono::seconds(30), std::chrono::seconds(300));
  CHECK(stop_limit() == std::chrono::seconds(300));
  set_stop_limit(std::chrono::seconds(1)); // 60 s, as the other tests found it
}

TEST_CASE("a ring's re-form: every survivor goes on from the furthest step, and each one behind takes a donor's state, on its own host where it can") {
  using gradwire::scheduler::decide_reform;
  // rank -> (steps done, abandoned a round): 1 and 4 finished step 7's round, the others did not.
  const std::map<int, std::pair<std::int64_t, bool>> replies{
    {0, {6, true}}, {1, {7, false}}, {2, {6, true}}, {3, {6, true}}, {4, {7, true}}};
  const auto spread = decide_reform(replies);
  CHECK(spread.step == 7);
  CHECK(spread.lost_round);
  // Hosts unknown: the donors in turn.
  CHECK(spread.transfers == std::vector<std::pair<int, int>>{{1, 0}, {4, 2}, {1, 3}});
  // Hosts {0, 1} and {2, 3, 4}: ranks 2 and 3 take 4's state beside them, rank 0 takes 1's.
  const auto near = decide_reform(replies, {0, 0, 1, 1, 1});
  CHECK(near.transfers == std::vector<std::pair<int, int>>{{1, 0}, {4, 2}, {4, 3}});
  // No host holds a donor: the donors in turn again.
  CHECK(decide_reform(replies, {0, 1, 0, 0, 1}).transfers == std::vector<std::pair<int, int>>{{1, 0}, {4, 2}, {1, 3}});
  // Everyone at one step: nothing to send.
  const auto even = decide_reform({{0, {3, false}}, {2, {3, false}}});
  CHECK(even.step == 3);
  CHECK_FALSE(even.lost_round);
  CHECK(even.transfers.empty());
}

TEST_CASE("mtbf_per_worker: the job's gaps have mean mtbf_s over the workers that may be struck, fewer as kills take them") {
  auto each = mtbf(fault_kind::stall, 7.0);
  each.mtbf_per_worker = true;
  const auto per_worker = fault_schedule({each}, 8, 5); // ranks 1 to 7: 7 candidates
  const auto job = fault_schedule({mtbf(fault_kind::stall, 1.0)}, 8, 5);
  REQUIRE(per_worker.size() == job.size());
  // Each candidate's MTBF divided by the candidates is the job's MTBF: the same draws.
  for (std::size_t i = 0; i < job.size(); ++i) {
    CHECK(per_worker[i].at_seconds == job[i].at_seconds);
    CHECK(per_worker[i].ranks == job[i].ranks);
  }
  auto kills = mtbf(fault_kind::kill, 1.0);
  kills.mtbf_per_worker = true;
  double first = 0, last = 0;
  constexpr int seeds = 2000;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    const auto s = fault_schedule({kills}, 5, seed); // 4 candidates, each killed once
    REQUIRE(s.size() == 4u);
    first += s[0].at_seconds;
    last += s[3].at_seconds - s[2].at_seconds;
  }
  CHECK(first / seeds == Approx(0.25).epsilon(0.1)); // the first of 4
  CHECK(last / seeds == Approx(1.0).epsilon(0.1));   // the last one alone
}
