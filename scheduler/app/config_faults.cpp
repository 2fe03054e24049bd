#include "scheduler/app/config_faults.hpp"

#include "kernels/error.hpp"
#include "scheduler/app/config_toml.hpp"

#include <algorithm>
#include <set>

namespace gradwire::scheduler {

namespace {

/// The keys besides kind, rank, ranks and the when-keys that each kind reads.
std::set<std::string> own_keys(fault_kind k) {
  switch (k) {
  case fault_kind::kill: return {};
  case fault_kind::nan: return {};
  case fault_kind::stall: return {"seconds"};
  case fault_kind::slow: return {"seconds", "factor"};
  case fault_kind::delay: return {"seconds", "delay_ms", "peer"};
  case fault_kind::drop: return {"seconds", "peer"};
  case fault_kind::partition: return {"seconds"};
  case fault_kind::suspend: return {"seconds"};
  }
  return {};
}

} // namespace

namespace {

/// One [[faults]] entry's reading: its rank checks name the entry.
struct fault_reader {
  const toml::table& t;
  const run_config& c;
  fault_spec& f;
  std::string kind_text;
  std::string last; ///< the highest rank, for messages

  void check_rank(std::int64_t r, const std::string& what) const {
    check(r >= 0 && r < c.workers, f.where + ": " + what + " = " + std::to_string(r) +
                                     ", but the workers are ranks 0 to " + last);
  }

  /// When: exactly one of at_step, at_seconds, mtbf_s.
  void when() {
    const int whens = t.contains("at_step") + t.contains("at_seconds") + t.contains("mtbf_s");
    check(whens == 1, f.where + ": say when, with exactly one of at_step (after that step of the struck worker), "
                                "at_seconds or mtbf_s" + (whens > 1 ? " (it gives " + std::to_string(whens) + ")" : ""));
    f.at_step = t["at_step"].value_or(std::int64_t{0});
    check(!t.contains("at_step") || f.at_step >= 1, f.where + ": at_step = " + std::to_string(f.at_step) + " must be 1 or more");
    f.at_seconds = t["at_seconds"].value_or(-1.0);
    check(!t.contains("at_seconds") || f.at_seconds >= 0, f.where + ": at_seconds must be 0 or more");
    f.mtbf_s = t["mtbf_s"].value_or(0.0);
    check(!t.contains("mtbf_s") || f.mtbf_s > 0, f.where + ": mtbf_s must be more than 0 (seconds)");
    f.mtbf_per_worker = t["mtbf_per_worker"].value_or(false);
    check(!f.mtbf_per_worker || (f.mtbf_s > 0 && f.kind != fault_kind::partition),
          f.where + ": mtbf_per_worker makes mtbf_s each struck worker's: give mtbf_s, and a kind that strikes one "
                    "worker (not a partition)");
  }

  /// Who: rank, or ranks (a partition's set, or mtbf_s's candidates).
  void who() {
    f.rank = static_cast<int>(t["rank"].value_or(std::int64_t{-1}));
    if (const auto* list = t["ranks"].as_array())
      for (const auto& v : *list) {
        const auto r = v.value_or(std::int64_t{-1});
        check_rank(r, "an entry of ranks");
        check(std::find(f.ranks.begin(), f.ranks.end(), r) == f.ranks.end(),
              f.where + ": ranks names rank " + std::to_string(r) + " twice");
        f.ranks.push_back(static_cast<int>(r));
      }
    if (f.kind == fault_kind::partition) {
      check(!t.contains("rank"), f.where + ": a partition strikes a set of ranks: give ranks = [...], not rank");
      check(!f.ranks.empty() && static_cast<int>(f.ranks.size()) < c.workers,
            f.where + ": ranks = the workers cut off from the others: 1 to " + last + " of them");
    } else if (t.contains("rank") || f.mtbf_s <= 0) {
      check(t.contains("rank"), f.where + ": rank = the worker it strikes (0 to " + last + ")");
      check_rank(f.rank, "rank");
      check(f.ranks.empty(), f.where + ": give rank or ranks (with mtbf_s), not both");
    } else
      check(c.workers > 1, f.where + ": mtbf_s draws from ranks 1 to " + last + ": there are none");
  }

  /// How: how long, how much slower, what delay, toward which peer.
  void how() {
    f.seconds = t["seconds"].value_or(0.0);
    check(!lasts(f.kind) || f.seconds > 0, f.where + ": seconds = how long the " + kind_text + " lasts, more than 0");
    f.factor = t["factor"].value_or(1.0);
    check(f.kind != fault_kind::slow || f.factor > 1, f.where + ": factor = how many times slower, more than 1");
    f.delay_ms = t["delay_ms"].value_or(0.0);
    check(f.kind != fault_kind::delay || f.delay_ms > 0, f.where + ": delay_ms = the delay added to every frame, more than 0");
    f.peer = static_cast<int>(t["peer"].value_or(std::int64_t{-1}));
    if (t.contains("peer")) {
      check_rank(f.peer, "peer");
      check(f.peer != f.rank, f.where + ": peer = " + std::to_string(f.peer) + " is the struck rank itself");
    }
  }

  /// back_at_step (kill, stall) and mid_step (stall, suspend).
  void after() {
    f.back_at_step = t["back_at_step"].value_or(std::int64_t{0});
    if (t.contains("back_at_step")) {
      check(f.kind == fault_kind::kill || f.kind == fault_kind::stall,
            f.where + ": back_at_step applies to kind = \"kill\" (a new process) and \"stall\" only");
      check(f.at_step > 0 && f.back_at_step > f.at_step,
            f.where + ": back_at_step = " + std::to_string(f.back_at_step) + " must come after at_step" +
              (f.at_step > 0 ? " = " + std::to_string(f.at_step) : " (give the fault's at_step)"));
    }
    f.mid_step = t["mid_step"].value_or(false);
    if (t.contains("mid_step")) {
      check(f.kind == fault_kind::stall || f.kind == fault_kind::suspend,
            f.where + ": mid_step applies to kind = \"stall\" and \"suspend\" only");
      check(!f.mid_step || f.at_step > 0, f.where + ": mid_step strikes inside the step after at_step: give at_step");
    }
  }
};

} // namespace

void read_faults(const toml::table& root, const std::string& source, run_config& c) {
  const auto* entries = root.get_as<toml::array>("faults");
  if (!entries)
    return;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const auto& t = *entries->get(i)->as_table();
    fault_spec f;
    f.where = config_toml::where(source, *entries->get(i)) + ": [[faults]] #" + std::to_string(i + 1);
    const auto kind_text = t["kind"].value_or(std::string("kill"));
    const auto kind = parse_fault_kind(kind_text);
    check(kind.has_value(), f.where + ": kind = \"" + kind_text + "\" is not a fault kind");
    f.kind = *kind;
    check(!c.single(), f.where + ": a " + kind_text + " fault needs a topology of several workers, " +
                                    "run across processes (--procs N)");
    for (const auto& key : {"seconds", "factor", "delay_ms", "peer"})
      check(!t.contains(key) || own_keys(f.kind).count(key),
            f.where + ": " + key + " does not apply to kind = \"" + kind_text + "\"");
    fault_reader r{t, c, f, kind_text, std::to_string(c.workers - 1)};
    r.when();
    r.who();
    r.how();
    r.after();
    c.faults.push_back(f);
  }
}

toml::array faults_toml(const run_config& c) {
  toml::array out;
  for (const auto& f : c.faults) {
    // The keys as the entry gave them, so that config.toml reads back the same.
    toml::table t{{"kind", to_string(f.kind)}};
    if (f.rank >= 0 && f.kind != fault_kind::partition)
      t.insert("rank", f.rank);
    if (!f.ranks.empty()) {
      toml::array ranks;
      for (int r : f.ranks)
        ranks.push_back(r);
      t.insert("ranks", std::move(ranks));
    }
    if (f.at_step > 0)
      t.insert("at_step", f.at_step);
    else if (f.mtbf_s > 0)
      t.insert("mtbf_s", f.mtbf_s);
    else
      t.insert("at_seconds", f.at_seconds);
    if (f.mtbf_per_worker)
      t.insert("mtbf_per_worker", true);
    if ((f.kind == fault_kind::delay || f.kind == fault_kind::drop) && f.peer >= 0)
      t.insert("peer", f.peer);
    if (lasts(f.kind))
      t.insert("seconds", f.seconds);
    if (f.kind == fault_kind::slow)
      t.insert("factor", f.factor);
    if (f.kind == fault_kind::delay)
      t.insert("delay_ms", f.delay_ms);
    if (f.back_at_step > 0)
      t.insert("back_at_step", f.back_at_step);
    if (f.mid_step)
      t.insert("mid_step", true);
    out.push_back(std::move(t));
  }
  return out;
}

} // namespace gradwire::scheduler
