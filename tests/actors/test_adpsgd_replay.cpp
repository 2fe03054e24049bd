// AD-PSGD's record and replay (actors/mix_record.hpp, gossip_mixer.hpp's
// gate): a store's events read back as written, a cut file as its whole
// events, hostile bytes are refused naming the file; a store's gate takes
// averages in the record's order whatever order they come in; and a real
// 3-worker run with a slow worker, replayed from its record under other
// thread counts and other delays (so other arrival orders), gives the same
// bits and records the same events, while a what-if changes only the model.
#include "actors/gossip_mixer.hpp"
#include "actor_env.hpp"
#include "kernels/error.hpp"
#include "models/dataset.hpp"
#include "temp_dir.hpp"
#include "topology_support.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

using namespace gradwire;
using namespace gradwire::actors;
using namespace gwtest;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

mix_event ev(mix_kind k, int rank, std::int64_t step) { return {k, rank, step}; }

/// A worker's whole record: `steps` steps of worker 1 (of 3), neighbours'
/// averages in between.
std::vector<mix_event> whole_run(int steps) {
  std::vector<mix_event> out;
  for (int k = 0; k < steps; ++k) {
    out.push_back(ev(mix_kind::read, 1, k));
    out.push_back(ev(mix_kind::mix, k % 2 == 0 ? 0 : 2, k));
    out.push_back(ev(mix_kind::send, 1, k));
    out.push_back(ev(k % 3 == 0 ? mix_kind::apply_alone : mix_kind::apply_mixed, 1, k));
  }
  out.push_back(ev(mix_kind::close, 1, steps));
  return out;
}

std::string written(const std::string& path, const std::vector<mix_event>& events) {
  mix_record_writer w(path, {1, 3, ""}, 0);
  for (const auto& e : events)
    w.add(e);
  REQUIRE(w.error().empty());
  return path;
}

} // namespace

TEST_CASE("mixer record: events read back as written, 2 bytes each, a cut file as its whole events") {
  const auto dir = fresh_dir("mixrec", true);
  const auto events = whole_run(50);
  const auto path = written(dir + "/mixer-1.gwr", events);
  const auto r = read_mix_record(path);
  CHECK(r.events == events);
  CHECK(r.closed());
  CHECK_FALSE(r.cut);
  CHECK(r.steps() == 50);
  CHECK_NOTHROW(check_replayable(r));
  const auto header = slurp(path).size() - static_cast<std::size_t>(2 * events.size());
  CHECK(header < 40); // 2 bytes an event, after the header
  const auto bytes = slurp(path);
  for (std::size_t n = header; n < bytes.size(); n += 7) {
    const auto part = mix_record_from_bytes(bytes.substr(0, n), "part");
    CHECK(part.events.size() == (n - header) / 2);
    CHECK(part.cut == ((n - header) % 2 != 0));
    CHECK_THROWS_WITH(check_replayable(part), Catch::Contains("ends before worker 1 finished"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("mixer record: hostile bytes and out-of-order events are refused, naming the file") {
  const auto dir = fresh_dir("mixbad", true);
  const auto good = slurp(written(dir + "/mixer-1.gwr", whole_run(3)));
  const auto header = good.size() - 2 * whole_run(3).size();
  CHECK_THROWS_WITH(mix_record_from_bytes("GWREC001" + good.substr(8), "x.gwr"), Catch::Contains("x.gwr: not a gradwire mixer record"));
  auto bad_rank = good;
  bad_rank[header] = static_cast<char>(7 * 8); // worker 7 of 3
  CHECK_THROWS_WITH(mix_record_from_bytes(bad_rank, "y.gwr"), Catch::Contains("y.gwr: event at byte") && Catch::Contains("names worker 7 of 3"));
  auto bad_kind = good;
  bad_kind[header] = static_cast<char>(1 * 8 + 7);
  CHECK_THROWS_WITH(mix_record_from_bytes(bad_kind, "z.gwr"), Catch::Contains("of no known kind"));
  auto events = whole_run(3);
  std::swap(events[2], events[3]); // apply before send
  const auto swapped = read_mix_record(written(dir + "/swapped.gwr", events));
  CHECK_THROWS_WITH(check_replayable(swapped), Catch::Contains("swapped.gwr: worker 1's apply at step 0 where the event after worker 1's read"));
  std::filesystem::remove_all(dir);
}

namespace {

slice filled(float v) {
  auto t = slice::empty({4});
  for (int i = 0; i < 4; ++i)
    t.data()[i] = v + static_cast<float>(i);
  return t;
}

} // namespace

TEST_CASE("AD-PSGD gate: a store takes averages in the record's order, whatever order they come in") {
  actor_env env(3);
  auto rec = std::make_shared<mix_record>();
  rec->path = "mixer-1.gwr";
  rec->header = {1, 3, ""};
  rec->events = {ev(mix_kind::mix, 0, 4), ev(mix_kind::mix, 2, 9), ev(mix_kind::mix, 0, 6), ev(mix_kind::close, 1, 0)};
  auto store = std::make_shared<gossip_store>();
  store->x = filled(0.f);
  store->gate = open_mix_gate(rec);
  auto mixer = spawn_gossip_mixer(*env.sys, store);
  caf::scoped_actor self{*env.sys};
  const auto timeout = std::chrono::seconds(30);
  // Rank 2's average comes first but is second in the record: held until rank 0's is taken.
  auto second = self->request(mixer, timeout, average_atom::value, 2, std::int64_t{9}, filled(20.f));
  auto first = self->request(mixer, timeout, average_atom::value, 0, std::int64_t{4}, filled(10.f));
  slice got0, got2;
  first.receive([&](const slice& s) { got0 = s; }, [&](caf::error& e) { FAIL(env.sys->render(e)); });
  second.receive([&](const slice& s) { got2 = s; }, [&](caf::error& e) { FAIL(env.sys->render(e)); });
  for (int i = 0; i < 4; ++i) {
    CHECK(got0.data()[i] == filled(0.f).data()[i]);                    // x before any average
    CHECK(got2.data()[i] == (filled(0.f).data()[i] + filled(10.f).data()[i]) / 2); // after rank 0's
  }
  // An average the record does not hold next for that rank: the replay diverged.
  std::string error;
  self->request(mixer, timeout, average_atom::value, 0, std::int64_t{5}, filled(1.f))
    .receive([&](const slice&) { error = "answered"; }, [&](caf::error& e) { error = env.sys->render(e); });
  CHECK_THAT(error, Catch::Contains("worker 0's average at its step 5 where worker 1's record has worker 0's average at its step 6"));
  self->request(mixer, timeout, average_atom::value, 0, std::int64_t{6}, filled(1.f))
    .receive([&](const slice&) { error.clear(); }, [&](caf::error& e) { error = env.sys->render(e); });
  CHECK(error.empty());
  // An average the record never took (it came after the close): held, then
  // refused once the store closes, as the run's was.
  auto late = self->request(mixer, timeout, average_atom::value, 2, std::int64_t{10}, filled(1.f));
  auto bad = slice::empty({3}); // answered at once: the late average is in the mixer's hands by then
  self->request(mixer, timeout, average_atom::value, 2, std::int64_t{11}, bad)
    .receive([&](const slice&) { FAIL("a wrong size was averaged"); }, [&](caf::error& e) { error = env.sys->render(e); });
  CHECK_THAT(error, Catch::Contains("sent 3 parameters, expected 4"));
  std::string why;
  CHECK(store_event(*store, ev(mix_kind::close, 1, 0), caf::actor_cast<caf::actor>(self), [](slice&, const mix_event&) {},
                    &why) == turn::taken);
  late.receive([&](const slice&) { error = "answered"; }, [&](caf::error& e) { error = env.sys->render(e); });
  CHECK_THAT(error, Catch::Contains("request_receiver_down"));
  caf::anon_send_exit(mixer, caf::exit_reason::user_shutdown);
  // A mixer that ends (its worker did) answers what it holds.
  auto other = std::make_shared<gossip_store>();
  other->x = filled(0.f);
  auto rec2 = std::make_shared<mix_record>(*rec);
  rec2->events = {ev(mix_kind::mix, 0, 1), ev(mix_kind::mix, 2, 0), ev(mix_kind::close, 1, 0)};
  other->gate = open_mix_gate(rec2);
  auto ending = spawn_gossip_mixer(*env.sys, other);
  auto held = self->request(ending, timeout, average_atom::value, 2, std::int64_t{0}, filled(1.f)); // due second: held
  self->request(ending, timeout, average_atom::value, 2, std::int64_t{1}, bad).receive([](const slice&) {}, [](caf::error&) {});
  caf::anon_send_exit(ending, caf::exit_reason::user_shutdown);
  error.clear();
  held.receive([&](const slice&) { error = "answered"; }, [&](caf::error& e) { error = env.sys->render(e); });
  CHECK_THAT(error, Catch::Contains("request_receiver_down"));
}

namespace {

/// A 3-worker AD-PSGD run of a small MLP, one worker slow.
scheduler::topology_setup adpsgd_setup() {
  auto s = small_setup(3, 1, false);
  s.family = &scheduler::gossip_family;
  s.gossip.mode = gossip_mode::adpsgd;
  s.steps = 30;
  s.worker_delay_ms = {0.0, 0.0, 3.0};
  return s;
}

/// The run's records, as a replay reads them.
std::shared_ptr<const replay_cut> records_of(const std::string& dir, int workers) {
  auto cut = std::make_shared<replay_cut>();
  for (int r = 0; r < workers; ++r) {
    auto rec = std::make_shared<mix_record>(read_mix_record(dir + "/mixer-" + std::to_string(r) + ".gwr"));
    cut->steps.push_back(rec->steps());
    cut->mixers.push_back(std::move(rec));
  }
  return cut;
}

} // namespace

TEST_CASE("AD-PSGD replay: 3 workers, one slow, the same bits under other threads and other arrival orders") {
  auto data = models::make_synthetic(1024, 1, 28, 28, 10, 31);
  auto setup = adpsgd_setup();
  const auto dir = fresh_dir("adpsgd-run");
  setup.record_dir = dir;
  std::vector<float> run;
  {
    actor_env env(2);
    run = scheduler::run_topology(*env.sys, setup, data).params;
  }
  const auto cut = records_of(dir, 3);
  std::vector<const mix_record*> all;
  for (const auto& m : cut->mixers)
    all.push_back(m.get());
  CHECK_NOTHROW(check_pairings(all));
  CHECK_THROWS_WITH(check_pairings({all[0], all[0], all[2]}), Catch::Contains("the records are not of one run")); // worker 0 twice, 1 missing
  std::int64_t mixes = 0;
  for (const auto& m : cut->mixers)
    mixes += std::count_if(m->events.begin(), m->events.end(), [](const mix_event& e) { return e.kind == mix_kind::mix; });
  INFO("the run averaged " << mixes << " times");
  CHECK(mixes > 0);
  for (int threads : {1, 4}) {
    auto again = setup;
    again.replay = cut;
    again.record_dir = fresh_dir("adpsgd-replay-" + std::to_string(threads));
    again.worker_delay_ms = threads == 1 ? std::vector<double>{3.0, 0.0, 0.0} : std::vector<double>{0.0, 2.0, 0.0};
    actor_env env(threads);
    const auto out = scheduler::run_topology(*env.sys, again, data);
    CHECK(out.params == run);
    for (int r = 0; r < 3; ++r) {
      const auto name = "/mixer-" + std::to_string(r) + ".gwr";
      CHECK(slurp(again.record_dir + name) == slurp(dir + name));
    }
    std::filesystem::remove_all(again.record_dir);
  }
  SECTION("what-if: another learning rate keeps every event and changes the model") {
    auto whatif = setup;
    whatif.replay = cut;
    whatif.opt.lr = 0.02f;
    whatif.record_dir = fresh_dir("adpsgd-whatif");
    actor_env env(2);
    const auto out = scheduler::run_topology(*env.sys, whatif, data);
    CHECK(out.params != run);
    for (int r = 0; r < 3; ++r)
      CHECK(read_mix_record(whatif.record_dir + "/mixer-" + std::to_string(r) + ".gwr").events == cut->mixers[static_cast<std::size_t>(r)]->events);
    std::filesystem::remove_all(whatif.record_dir);
  }
  std::filesystem::remove_all(dir);
}
