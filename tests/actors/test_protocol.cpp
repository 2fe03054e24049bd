// The actors' protocol: one atom per meaning in the message table, and a
// message no handler takes (a wrong signature, an old overloaded form) is
// refused back to its sender and logged, while the actor goes on.
#include "actor_env.hpp"
#include "actors/messages.hpp"
#include "actors/ps_shard.hpp"
#include "actors/refuse.hpp"
#include "actors/snapshot.hpp"
#include "stderr_capture.hpp"

#include <catch2/catch.hpp>

#include <set>

using namespace gradwire;
using gwtest::actor_env;

namespace {

actors::shard_config small_shard() {
  actors::shard_config sc;
  sc.end = 64;
  sc.ps.sync = true;
  return sc;
}

int count_of(const std::string& text, const std::string& what) {
  int found = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++found;
  return found;
}

} // namespace

TEST_CASE("protocol: every atom of the message table is listed once") {
  std::set<std::uint64_t> seen;
  for (const auto& k : actors::message_table)
    CHECK(seen.insert(static_cast<std::uint64_t>(k.atom)).second);
  // The meanings that once shared an atom each have their own.
  for (caf::atom_value a : std::initializer_list<caf::atom_value>{actors::stop_atom::value, actors::lost_atom::value, actors::tick_atom::value,
                 actors::paused_atom::value, actors::run_to_atom::value, actors::snapshot_at_atom::value,
                 actors::pin_atom::value, actors::abandon_atom::value, actors::abandoned_atom::value,
                 actors::hold_at_atom::value, actors::knock_atom::value, actors::rebuilt_atom::value,
                 actors::replica_atom::value, actors::donor_atom::value, actors::peer_wire_atom::value,
                 actors::rewire_atom::value, actors::reduce_failed_atom::value, actors::replica_state_atom::value})
    CHECK(seen.count(static_cast<std::uint64_t>(a)) == 1);
}

TEST_CASE("protocol: a shard refuses a message of the wrong signature, tells the requester and logs it") {
  actor_env env;
  gwtest::stderr_capture cap("protocol-refused");
  auto shard = actors::spawn_ps_shard(*env.sys, small_shard(), actors::slice::zeros({64}));
  caf::scoped_actor self{*env.sys};
  // Through an untyped handle, as a peer's frames reach it: the typed one
  // would not compile these (protocol_misuse.sh).
  const auto wire = caf::actor_cast<caf::actor>(shard);
  caf::error got;
  // A reform's integer of the wrong width; then the pin as it was once sent, a flag choosing its meaning.
  self->request(wire, std::chrono::seconds(10), actors::reform_atom::value, std::int64_t{1})
    .receive([] { FAIL("a message of the wrong signature was handled"); }, [&](caf::error& e) { got = e; });
  CHECK(got == caf::sec::unexpected_message);
  got = caf::error{};
  self->request(wire, std::chrono::seconds(10), actors::snapshot_atom::value, std::int64_t{2}, true)
    .receive([] { FAIL("(snapshot, version, bool) was taken for a pin"); }, [&](caf::error& e) { got = e; });
  CHECK(got == caf::sec::unexpected_message);
  // The shard goes on: it answers a good request.
  std::int64_t version = -1;
  self->request(shard, std::chrono::seconds(10), actors::fetch_atom::value)
    .receive([&](std::int64_t v, const actors::slice&) { version = v; }, [&](caf::error& e) { FAIL(env.sys->render(e)); });
  CHECK(version == 0);
  self->send_exit(shard, caf::exit_reason::user_shutdown);
  const auto text = cap.text();
  CHECK(count_of(text, "gradwire: warning: shard 0: refused a message it has no handler for") == 2);
  CHECK(text.find("reform") != std::string::npos);
}

TEST_CASE("protocol: a flood of stray messages is refused in full but logged only so often") {
  actor_env env;
  gwtest::stderr_capture cap("protocol-flood");
  auto shard = actors::spawn_ps_shard(*env.sys, small_shard(), actors::slice::zeros({64}));
  caf::scoped_actor self{*env.sys};
  const auto wire = caf::actor_cast<caf::actor>(shard); // as a peer's frames reach it
  for (int i = 0; i < 50; ++i)
    self->send(wire, actors::hold_at_atom::value, std::int64_t{i}); // a ring worker's message
  bool answered = false; // the mailbox is in order: every stray one was handled before this
  self->request(shard, std::chrono::seconds(10), actors::fetch_atom::value)
    .receive([&](std::int64_t, const actors::slice&) { answered = true; }, [&](caf::error& e) { FAIL(env.sys->render(e)); });
  CHECK(answered);
  self->send_exit(shard, caf::exit_reason::user_shutdown);
  CHECK(count_of(cap.text(), "refused a message it has no handler for") == actors::refusals_logged);
}

TEST_CASE("protocol: a refusal names the actor and cuts a long message short") {
  const auto line = actors::refusal_text("worker 3", std::string(1000, 'x'));
  CHECK(line.rfind("worker 3: refused a message it has no handler for: ", 0) == 0);
  CHECK(line.size() < 300);
  CHECK(line.substr(line.size() - 3) == "...");
}
