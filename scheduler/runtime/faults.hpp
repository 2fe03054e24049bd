#pragma once
/// @file faults.hpp
/// Faults injected from the config ([[faults]]), deterministically: the
/// schedule of every strike follows from the entries, the worker count and
/// the run's seed alone, so every process computes the same one, and a
/// strike lands at a worker's step boundary, never at a wall-clock guess.
///
/// | kind | what the struck rank's process does | for how long |
/// |---|---|---|
/// | kill | exits abruptly, as SIGKILL leaves it | for good |
/// | stall | stops (SIGSTOP; in one process: the worker's thread sleeps) | `seconds` |
/// | slow | computes `factor` times slower while it lasts | `seconds` |
/// | delay | frames on its link to `peer` (every peer: -1) arrive `delay_ms` later, both ways | `seconds` |
/// | drop | that link is down, both ways: frames wait until it is back | `seconds` |
/// | partition | `ranks` and the others cannot reach each other | `seconds` |
/// | suspend | the job's processes on this host stop at once (SIGSTOP), as SLURM's scontrol suspend or Ctrl-Z does | `seconds` |
///
/// A stall or suspend with `mid_step` lands inside the computation of the
/// step after at_step instead (fault_injector::in_step), where a job
/// stopped at a random moment most often is. A slow spell slows only the
/// work done while it lasts.
///
/// A stall, drop or partition longer than the liveness bound
/// (transport.peer_timeout_ms) is a lost rank: rank 0 cuts it off (an
/// elastic ring re-forms without it) and fences it, and it leaves the job
/// when it can hear again. kill, delay, drop and partition act on
/// processes and links: they need a job across processes, or virtual
/// time, where a killed worker ends at its step boundary as its process
/// would (virtual_reform.hpp re-forms a ring) and the link model holds or
/// delays the messages between the actors of the processes a link fault
/// names (simulation::impair_links), and a suspend stops every actor on
/// the struck rank's host (simulation::suspend_host). Virtual time has no
/// liveness bound: a stall, drop or partition of any length is waited out
/// there.

#include "actors/virtual_clock.hpp"
#include "transport/link_faults.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::scheduler {

/// nan: the struck worker's next gradient (and loss) is NaN, as a diverging
/// step's would be: train.on_nonfinite's test.
enum class fault_kind { kill, stall, slow, delay, drop, partition, suspend, nan };

std::string to_string(fault_kind k);
std::optional<fault_kind> parse_fault_kind(const std::string& text);
/// kill, delay, drop and partition act on processes or the links between them.
bool needs_processes(fault_kind k);
/// Every kind but kill lasts `seconds`.
bool lasts(fault_kind k);

/// A [[faults]] entry, as the config gives it (checked there).
struct fault_spec {
  fault_kind kind = fault_kind::kill;
  int rank = -1;            ///< the worker (process) it strikes; -1: drawn from `ranks` (mtbf_s)
  std::vector<int> ranks;   ///< partition: the set cut off from the others; mtbf_s: the ranks it may strike
  int peer = -1;            ///< delay, drop: the link's other end (-1: every peer)
  std::int64_t at_step = 0; ///< after that worker's step at_step (0: by time)
  double at_seconds = -1;   ///< at the struck worker's first step boundary this long after it started
  double mtbf_s = 0;        ///< again and again: exponential gaps of this mean, drawn from the run's seed
  bool mtbf_per_worker = false; ///< mtbf_s is each candidate's: the job's gaps have mean mtbf_s / candidates left
  double seconds = 0;       ///< how long (stall, slow, delay, drop, partition)
  double factor = 1;        ///< slow: compute time multiplied by this
  double delay_ms = 0;      ///< delay: added to every frame on the link
  std::int64_t back_at_step = 0; ///< kill, stall: let back in no earlier than this step (0: when it asks)
  bool mid_step = false;    ///< stall, suspend with at_step: inside the next step's computation, not after the step
  std::string where;        ///< "file:line: [[faults]] #i", for messages
};

/// One strike of an entry.
struct fault_strike {
  std::size_t entry = 0;    ///< which [[faults]] entry (0-based)
  fault_kind kind = fault_kind::kill;
  std::vector<int> ranks;   ///< the struck rank; for a partition, the set
  int peer = -1;
  std::int64_t at_step = 0; ///< 0: at_seconds
  double at_seconds = -1;
  double seconds = 0, factor = 1, delay_ms = 0;
  bool mid_step = false; ///< lands in the next step's computation (fault_injector::in_step)
};

/// Strikes drawn from an mtbf_s entry, at most (a run meets far fewer).
constexpr int max_strikes_per_entry = 4096;

/// Every strike of the job, in entry order. An mtbf_s entry strikes at
/// gaps drawn from an exponential distribution (seeded by `seed` and the
/// entry's index), each time on a rank drawn from its candidates (`ranks`,
/// `rank`, or every rank but 0, which holds the coordinator); a kill
/// never strikes a rank killed before.
std::vector<fault_strike> fault_schedule(const std::vector<fault_spec>& specs, int workers, std::uint64_t seed);

/// The strikes that concern one worker's process, applied at its step
/// boundaries (fault_hooks::after_step) and in its compute
/// (fault_hooks::slowdown_now).
class fault_injector {
public:
  /// `links`: this process's link faults (across processes; null in one process).
  /// `clock`: virtual time (a stall is charged to it, a slow spell and
  /// at_seconds count on it); null: the machine's clock.
  fault_injector(const std::vector<fault_strike>& all, int rank, int workers,
                 std::shared_ptr<transport::link_faults> links, std::shared_ptr<actors::virtual_clock> clock = {});
  /// After step `step`: every strike due now lands, but a mid_step one,
  /// which waits for in_step.
  void after_step(std::int64_t step);
  /// Inside a step's computation (after its gradients, before the emulated
  /// slowdown and the exchange): the mid_step strikes due land. A stop
  /// there is what a job stopped at a random moment most often meets.
  void in_step();
  /// The slow factor now (1: none).
  double slowdown_now() const;
  /// Whether a nan strike landed since the last call (the next step computes NaN).
  bool take_nan() { return std::exchange(nan_next_, false); }
  /// Virtual time: what killed this worker (fault_hooks::killed), once a
  /// kill has struck; "" until then. In real time a kill ends the process.
  const std::string& killed() const { return killed_; }
  /// How long `work` seconds of computing, begun `begun_ago` seconds ago,
  /// take under the slow spell (fault_hooks::slow_spell): `factor` times
  /// as long while it lasts, full speed after it ends.
  double slowed(double work, double begun_ago) const;

private:
  struct mine {
    fault_strike s;
    std::vector<int> peers; ///< the links it impairs from this process
    bool done = false;
    bool pending = false; ///< mid_step: due, waiting for in_step
  };
  void land(mine& m, std::int64_t step, bool inside = false);
  double now_s() const; ///< seconds on the injector's clock
  int rank_;
  std::shared_ptr<transport::link_faults> links_;
  std::shared_ptr<actors::virtual_clock> clock_;
  std::vector<mine> strikes_; ///< by step first, then by time in time order
  std::size_t next_timed_ = 0; ///< the first by-time strike not landed yet
  double started_; ///< steady seconds when the worker started
  double slow_from_ = 0, slow_until_ = 0, slow_factor_ = 1;
  std::int64_t last_step_ = 0; ///< the last step after_step saw
  bool any_pending_ = false;
  bool nan_next_ = false;
  std::string killed_;
};

} // namespace gradwire::scheduler
