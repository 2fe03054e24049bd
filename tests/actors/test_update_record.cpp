// The record of an async run (actors/update_record.hpp): what is written
// reads back entry for entry, a file cut anywhere reads as its whole
// entries, its bound ends it at a whole entry, hostile bytes are refused
// naming the file, and the cut a replay follows is consistent across
// shards (a push one shard's record lacks removes what came after it).
#include "actors/update_record.hpp"
#include "kernels/error.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

using namespace gradwire::actors;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::vector<record_entry> mixed_entries() {
  std::vector<record_entry> out;
  for (int k = 0; k < 40; ++k)
    for (int r = 0; r < 5; ++r) {
      const std::int64_t step = r == 3 ? 1000000 + 7 * k : k; // large steps and jumps
      out.push_back({true, r, step, 0});
      out.push_back({false, r, step, (k * 37 + r) % 1000});
    }
  out.push_back({true, 2, 3, 0}); // a step below the last: zigzag
  return out;
}

std::string written(const std::string& dir, const std::vector<record_entry>& entries, std::int64_t max_bytes = 0) {
  const auto path = dir + "/shard-0.gwr";
  record_writer w(path, {0, 16, 4096, 5}, max_bytes);
  for (const auto& e : entries)
    w.add(e);
  REQUIRE(w.error().empty());
  return path;
}

record_entry s(int r, std::int64_t k) { return {true, r, k, 0}; }
record_entry a(int r, std::int64_t k) { return {false, r, k, 0}; }

shard_record by_hand(int id, std::vector<record_entry> e) {
  shard_record r;
  r.path = "shard-" + std::to_string(id) + ".gwr";
  r.header = {id, 0, 16, 2};
  r.entries = std::move(e);
  return r;
}

} // namespace

TEST_CASE("a record reads back entry for entry, whatever its ranks, steps and stalenesses") {
  const auto dir = gwtest::fresh_dir("record-roundtrip", true);
  const auto entries = mixed_entries();
  const auto path = written(dir, entries);
  const auto r = read_record(path);
  CHECK(r.header.shard == 0);
  CHECK(r.header.begin == 16);
  CHECK(r.header.end == 4096);
  CHECK(r.header.workers == 5);
  CHECK_FALSE(r.cut);
  CHECK(r.bytes == static_cast<std::int64_t>(std::filesystem::file_size(path)));
  REQUIRE(r.entries.size() == entries.size());
  CHECK(r.entries == entries);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a record cut at any byte reads as its whole entries, and says it was cut inside one") {
  const auto dir = gwtest::fresh_dir("record-cut", true);
  const auto entries = mixed_entries();
  const auto full = slurp(written(dir, entries));
  std::size_t boundaries = 0;
  const auto cut_path = dir + "/cut.gwr";
  for (std::size_t n = 0; n <= full.size(); ++n) {
    spit(cut_path, full.substr(0, n));
    shard_record r;
    try {
      r = read_record(cut_path);
    } catch (const gradwire::error&) {
      continue; // the header itself is cut: refused
    }
    REQUIRE(r.entries.size() <= entries.size());
    CHECK(std::equal(r.entries.begin(), r.entries.end(), entries.begin()));
    if (!r.cut)
      ++boundaries;
  }
  CHECK(boundaries == entries.size() + 1); // every whole-entry length, and the bare header
  std::filesystem::remove_all(dir);
}

TEST_CASE("a record's bound ends it at a whole entry") {
  const auto dir = gwtest::fresh_dir("record-bound", true);
  const auto entries = mixed_entries();
  const auto path = dir + "/shard-0.gwr";
  {
    record_writer w(path, {0, 16, 4096, 5}, 200);
    for (const auto& e : entries)
      w.add(e);
    CHECK(w.capped());
    CHECK(w.bytes() <= 200);
  }
  const auto r = read_record(path);
  CHECK_FALSE(r.cut);
  CHECK(r.bytes <= 200);
  REQUIRE(!r.entries.empty());
  CHECK(r.entries.size() < entries.size());
  CHECK(std::equal(r.entries.begin(), r.entries.end(), entries.begin()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("hostile record bytes are refused naming the file") {
  const auto dir = gwtest::fresh_dir("record-hostile", true);
  const auto path = dir + "/shard-0.gwr";
  const auto refused = [&](const std::string& bytes, const std::string& says) {
    spit(path, bytes);
    CHECK_THROWS_WITH(read_record(path), Catch::Contains(path) && Catch::Contains(says));
  };
  const std::string head = "shard 0\nbegin 0\nend 4\nworkers 2\n";
  const auto framed = [](const std::string& text) {
    std::string out = "GWREC001";
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<char>((text.size() >> (8 * i)) & 0xff));
    return out + text;
  };
  refused("GWREC002 and so on", "not a gradwire record");
  refused(framed("shard 0\nbegin 0\n"), "malformed record header");
  refused(framed("shard 0\nbegin 8\nend 4\nworkers 2\n"), "malformed record header");
  refused(framed(head) + std::string("\x0a\x00\x00", 3), "names worker 5 of 2");
  refused(framed(head) + std::string("\x02\x01\x00", 3), "negative step");
  refused(framed(head) + std::string(11, '\xff'), "more than 64 bits");
  std::string big = "GWREC001";
  big += std::string("\xff\xff\xff\x7f", 4);
  refused(big, "malformed record header");
  std::filesystem::remove_all(dir);
}

TEST_CASE("complete records come back whole from the cut") {
  auto A = by_hand(0, {s(0, 0), s(1, 0), a(0, 0), s(0, 1), a(1, 0), s(1, 1), a(0, 1), a(1, 1)});
  auto B = by_hand(1, {s(1, 0), s(0, 0), a(1, 0), a(0, 0), s(1, 1), s(0, 1), a(0, 1), a(1, 1)});
  const auto cut = consistent_cut({A, B}, 2);
  CHECK(cut.steps == std::vector<std::int64_t>{2, 2});
  CHECK(cut.entries_left_out == 0);
  CHECK(cut.shards[0].entries == A.entries);
  CHECK(cut.shards[1].entries == B.entries);
}

TEST_CASE("a shard's record that ends early cuts the others at the first update it lacks") {
  auto A = by_hand(0, {s(0, 0), s(1, 0), a(0, 0), s(0, 1), a(1, 0), s(1, 1), a(0, 1), a(1, 1)});
  auto B = by_hand(1, {s(0, 0), s(1, 0), a(1, 0), s(1, 1), a(0, 0)}); // killed here
  const auto cut = consistent_cut({A, B}, 2);
  CHECK(cut.steps == std::vector<std::int64_t>{1, 1});
  CHECK(cut.shards[0].entries == std::vector<record_entry>{s(0, 0), s(1, 0), a(0, 0), a(1, 0)});
  CHECK(cut.shards[1].entries == std::vector<record_entry>{s(0, 0), s(1, 0), a(1, 0), a(0, 0)});
  CHECK(cut.entries_left_out == 5);
  CHECK(cut.updates_left_out == 2);
}

TEST_CASE("the cut cascades: an update after a lost one is lost too, and with it its worker's later steps") {
  // Shard 1 lacks worker 0's step 1; on shard 0 worker 1's push of step 0
  // came after it, so worker 1 completes no step anywhere.
  auto A = by_hand(0, {s(0, 0), s(1, 0), a(0, 0), s(0, 1), a(0, 1), a(1, 0)});
  auto B = by_hand(1, {s(0, 0), s(1, 0), a(0, 0), a(1, 0)});
  const auto cut = consistent_cut({A, B}, 2);
  CHECK(cut.steps == std::vector<std::int64_t>{1, 0});
  CHECK(cut.shards[0].entries == std::vector<record_entry>{s(0, 0), a(0, 0)});
  CHECK(cut.shards[1].entries == std::vector<record_entry>{s(0, 0), a(0, 0)});
}

TEST_CASE("records that do not follow each worker's steps, or belong to another run, are refused") {
  CHECK_THROWS_WITH(consistent_cut({by_hand(0, {a(0, 0)})}, 2), Catch::Contains("shard-0.gwr") &&
                                                                    Catch::Contains("must start with the run"));
  CHECK_THROWS_WITH(consistent_cut({by_hand(0, {s(0, 0), s(0, 1)})}, 2), Catch::Contains("pull of step 1"));
  CHECK_THROWS_WITH(consistent_cut({by_hand(0, {})}, 3), Catch::Contains("a record of 2 workers, for a run of 3"));
  CHECK_THROWS_WITH(consistent_cut({by_hand(1, {})}, 2), Catch::Contains("where shard 0's was expected"));
  CHECK_THROWS_WITH(consistent_cut({}, 2), Catch::Contains("no shard records"));
}

TEST_CASE("with several steps a push (async DiLoCo), a push may come up to that many steps after its pull") {
  const auto dir = gwtest::fresh_dir("record-rounds", true);
  const auto path = dir + "/shard-0.gwr";
  {
    record_writer w(path, {0, 0, 16, 2, 4}, 0);
    for (const auto& e : {s(0, 0), s(1, 0), a(0, 3), s(0, 4), a(1, 3), s(1, 4), a(0, 7), s(0, 8), a(0, 9)})
      w.add(e);
  }
  auto r = read_record(path);
  CHECK(r.header.steps_per_push == 4);
  const auto cut = consistent_cut({r}, 2);
  CHECK(cut.steps == std::vector<std::int64_t>{10, 4}); // worker 0's last round is 2 steps; worker 1 pulled, no push
  CHECK(cut.entries_left_out == 1);                      // that pull, for a step the replay does not run
  // A push beyond its round is refused, as one step a push refuses step 1 after step 0's pull.
  auto far = by_hand(0, {s(0, 0), a(0, 4)});
  far.header.steps_per_push = 4;
  CHECK_THROWS_WITH(consistent_cut({far}, 2), Catch::Contains("push of step 4"));
  CHECK_THROWS_WITH(consistent_cut({by_hand(0, {s(0, 0), a(0, 1)})}, 2), Catch::Contains("push of step 1"));
  std::filesystem::remove_all(dir);
}
