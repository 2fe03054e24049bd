#include "scheduler/runtime/faults.hpp"

#include <fmt/format.h>
#include "kernels/log.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>
#include <thread>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace gradwire::scheduler {
namespace {

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// This job's processes on this host: this one, and the ranks its launcher
/// (the same parent) started with the same GRADWIRE_TOKEN (--procs, or
/// srun's tasks on this node).
std::vector<pid_t> job_processes_here() {
  std::vector<pid_t> out{::getpid()};
  const char* tok = std::getenv("GRADWIRE_TOKEN");
  if (tok == nullptr || *tok == 0)
    return out; // one process
  const std::string mine = std::string("GRADWIRE_TOKEN=") + tok;
  const pid_t parent = ::getppid();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const auto name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == out.front())
      continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')'); // (the command name may hold spaces)
    if (close == std::string::npos)
      continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = -1;
    rest >> state >> ppid;
    if (ppid != parent)
      continue;
    std::ifstream env(e.path() / "environ", std::ios::binary);
    for (std::string var; std::getline(env, var, '\0');)
      if (var == mine) {
        out.push_back(pid);
        break;
      }
  }
  return out;
}

/// Stops `job` (job_processes_here) at once for `seconds`, as SLURM's
/// scontrol suspend (or gang scheduling) stops a job's tasks: a helper
/// process stops them all, waits, and lets them all go on. This thread
/// waits for the helper (and is stopped meanwhile).
void suspend_job(const std::vector<pid_t>& job, double seconds) {
  std::string pids;
  for (pid_t p : job)
    pids += " " + std::to_string(p);
  const std::string script = "kill -STOP" + pids + "; sleep " + std::to_string(seconds) + "; kill -CONT" + pids;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  pid_t helper = -1;
  if (::posix_spawn(&helper, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) {
    log::warn("[[faults]] suspend: could not start the helper that stops the job; no suspend");
    return;
  }
  int st = 0;
  ::waitpid(helper, &st, 0);
}

/// Stops this whole process for `seconds`, as a hung machine or a
/// debugger would: every thread, the heartbeats included. A helper process
/// waits until this one is stopped, then lets it go on.
void stall_process(double seconds) {
  const auto pid = std::to_string(::getpid());
  const std::string script = "while [ \"$(sed 's/.*) //' /proc/" + pid + "/stat | cut -d' ' -f1)\" != T ]; do "
                             "sleep 0.01; done; sleep " + std::to_string(seconds) + "; kill -CONT " + pid;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  pid_t helper = -1;
  if (::posix_spawn(&helper, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) {
    log::warn("[[faults]] stall: could not start the helper that ends it; stalling this thread instead");
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return;
  }
  ::raise(SIGSTOP);
  int st = 0;
  ::waitpid(helper, &st, 0);
}

} // namespace

std::string to_string(fault_kind k) {
  switch (k) {
  case fault_kind::kill: return "kill";
  case fault_kind::stall: return "stall";
  case fault_kind::slow: return "slow";
  case fault_kind::delay: return "delay";
  case fault_kind::drop: return "drop";
  case fault_kind::partition: return "partition";
  case fault_kind::suspend: return "suspend";
  case fault_kind::nan: return "nan";
  }
  return "?";
}

std::optional<fault_kind> parse_fault_kind(const std::string& text) {
  for (auto k : {fault_kind::kill, fault_kind::stall, fault_kind::slow, fault_kind::delay, fault_kind::drop,
                 fault_kind::partition, fault_kind::suspend, fault_kind::nan})
    if (to_string(k) == text)
      return k;
  return std::nullopt;
}

bool needs_processes(fault_kind k) {
  return k != fault_kind::stall && k != fault_kind::slow && k != fault_kind::suspend && k != fault_kind::nan;
}

bool lasts(fault_kind k) { return k != fault_kind::kill && k != fault_kind::nan; }

namespace {

/// An mtbf_s entry's strikes (entry `i`, its first strike `s`), each on a
/// rank drawn from its candidates; a kill never strikes a rank in `killed`.
void draw_strikes(const fault_spec& f, std::size_t i, fault_strike s, int workers, std::uint64_t seed,
                  std::vector<bool>& killed, std::vector<fault_strike>& out) {
  const bool everyone = f.kind == fault_kind::partition; // no rank drawn
  std::vector<int> candidates = everyone ? std::vector<int>{} : f.ranks;
  if (!everyone && candidates.empty()) {
    if (f.rank >= 0)
      candidates.push_back(f.rank);
    else
      for (int r = 1; r < workers; ++r)
        candidates.push_back(r);
  }
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 0x5bd1e995ULL * (i + 1));
  std::exponential_distribution<double> gap(1.0 / f.mtbf_s);
  double t = 0;
  for (int n = 0; n < max_strikes_per_entry; ++n) {
    if (f.kind == fault_kind::kill)
      candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                      [&](int r) { return r < 0 || r >= workers || killed[static_cast<std::size_t>(r)]; }),
                       candidates.end());
    if (!everyone && candidates.empty())
      break;
    // Per worker: the first of k workers that each fail at rate 1/mtbf_s fails at rate k/mtbf_s.
    t += f.mtbf_per_worker ? std::exponential_distribution<double>(static_cast<double>(candidates.size()) / f.mtbf_s)(rng)
                           : gap(rng);
    s.at_step = 0;
    s.at_seconds = t;
    if (everyone)
      s.ranks = f.ranks;
    else {
      const int r = candidates[std::uniform_int_distribution<std::size_t>(0, candidates.size() - 1)(rng)];
      s.ranks = {r};
      if (f.kind == fault_kind::kill)
        killed[static_cast<std::size_t>(r)] = true;
    }
    out.push_back(s);
    if (!everyone && f.kind != fault_kind::kill && s.peer == s.ranks.front())
      out.pop_back(); // a link to itself: no strike
  }
}

} // namespace

std::vector<fault_strike> fault_schedule(const std::vector<fault_spec>& specs, int workers, std::uint64_t seed) {
  std::vector<fault_strike> out;
  std::vector<bool> killed(static_cast<std::size_t>(std::max(workers, 0)), false);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& f = specs[i];
    fault_strike s;
    s.entry = i;
    s.kind = f.kind;
    s.peer = f.peer;
    s.seconds = f.seconds;
    s.factor = f.factor;
    s.delay_ms = f.delay_ms;
    s.mid_step = f.mid_step;
    if (f.mtbf_s > 0) {
      draw_strikes(f, i, s, workers, seed, killed, out);
      continue;
    }
    s.at_step = f.at_step;
    s.at_seconds = f.at_step > 0 ? -1 : f.at_seconds;
    s.ranks = f.kind == fault_kind::partition ? f.ranks : std::vector<int>{f.rank};
    if (f.kind == fault_kind::kill && f.rank >= 0 && f.rank < workers)
      killed[static_cast<std::size_t>(f.rank)] = true;
    out.push_back(s);
  }
  return out;
}

fault_injector::fault_injector(const std::vector<fault_strike>& all, int rank, int workers,
                               std::shared_ptr<transport::link_faults> links,
                               std::shared_ptr<actors::virtual_clock> clock)
    : rank_(rank), links_(std::move(links)), clock_(std::move(clock)), started_(now_s()) {
  for (const auto& s : all) {
    mine m;
    m.s = s;
    const int struck = s.ranks.empty() ? -1 : s.ranks.front();
    switch (s.kind) {
    case fault_kind::kill:
    case fault_kind::stall:
    case fault_kind::slow:
    case fault_kind::suspend:
    case fault_kind::nan:
      if (struck != rank)
        continue;
      break;
    case fault_kind::delay:
    case fault_kind::drop:
      if (struck == rank) {
        for (int r = 0; r < workers; ++r)
          if (r != rank && (s.peer < 0 || s.peer == r))
            m.peers.push_back(r);
      } else if (s.peer == rank || s.peer < 0)
        m.peers.push_back(struck);
      else
        continue;
      break;
    case fault_kind::partition: {
      const bool inside = std::find(s.ranks.begin(), s.ranks.end(), rank) != s.ranks.end();
      for (int r = 0; r < workers; ++r)
        if (r != rank && inside != (std::find(s.ranks.begin(), s.ranks.end(), r) != s.ranks.end()))
          m.peers.push_back(r);
      break;
    }
    }
    strikes_.push_back(std::move(m));
  }
  // By step first, then by time in time order: a step looks at the
  // by-step strikes and the next timed one only (an mtbf_s entry has thousands).
  std::stable_sort(strikes_.begin(), strikes_.end(), [](const mine& a, const mine& b) {
    if ((a.s.at_step > 0) != (b.s.at_step > 0))
      return a.s.at_step > 0;
    return a.s.at_step == 0 && a.s.at_seconds < b.s.at_seconds;
  });
  next_timed_ = static_cast<std::size_t>(
    std::count_if(strikes_.begin(), strikes_.end(), [](const mine& m) { return m.s.at_step > 0; }));
}

double fault_injector::now_s() const {
  return clock_ ? std::chrono::duration<double>(clock_->now().time_since_epoch()).count() : steady_s();
}

double fault_injector::slowdown_now() const { return now_s() < slow_until_ ? slow_factor_ : 1.0; }

double fault_injector::slowed(double work, double begun_ago) const {
  // Full speed before the spell, 1/factor inside it, full speed after.
  const double start = now_s() - begun_ago;
  const double before = std::max(0.0, slow_from_ - start);
  if (work <= before || slow_factor_ <= 1)
    return work;
  const double rest = work - before;
  const double inside = slow_until_ - std::max(start, slow_from_); // of the spell, from where the work meets it
  if (inside <= 0)
    return work;
  const double done_inside = inside / slow_factor_;
  return before + (rest <= done_inside ? rest * slow_factor_ : inside + (rest - done_inside));
}

void fault_injector::after_step(std::int64_t step) {
  for (auto& m : strikes_) {
    if (m.s.at_step <= 0)
      break; // the by-time strikes follow
    if (!m.done && step == m.s.at_step) {
      m.done = true;
      if (m.s.mid_step)
        m.pending = any_pending_ = true;
      else
        land(m, step);
    }
  }
  last_step_ = step;
  const double elapsed = now_s() - started_;
  while (next_timed_ < strikes_.size() && elapsed >= strikes_[next_timed_].s.at_seconds)
    land(strikes_[next_timed_++], step);
}

void fault_injector::in_step() {
  if (!any_pending_)
    return;
  any_pending_ = false;
  for (auto& m : strikes_)
    if (m.pending) {
      m.pending = false;
      land(m, last_step_ + 1, true);
    }
}

namespace {

/// What a strike does, for its log line: `peers` it impairs, the `job`'s
/// processes a suspend stops (`simulated`: every actor on a virtual host).
std::string strike_text(const fault_strike& s, std::size_t peers, std::size_t job, bool simulated) {
  switch (s.kind) {
  case fault_kind::kill: return "killed";
  case fault_kind::stall: return fmt::format("stalls for {:g} s", s.seconds);
  case fault_kind::slow: return fmt::format("computes {:g} times slower for {:g} s", s.factor, s.seconds);
  case fault_kind::delay: return fmt::format("links to {} peer(s) delayed by {:g} ms for {:g} s", peers, s.delay_ms, s.seconds);
  case fault_kind::drop: return fmt::format("links to {} peer(s) down for {:g} s", peers, s.seconds);
  case fault_kind::partition: return fmt::format("cut from {} peer(s) by a partition for {:g} s", peers, s.seconds);
  case fault_kind::nan: return "computes a NaN gradient in the next step";
  case fault_kind::suspend:
    return fmt::format("suspends the job ({}) for {:g} s",
                       simulated  ? std::string("every actor on its host")
                       : job == 1 ? std::string("this process")
                                  : std::to_string(job) + " processes on this host",
                       s.seconds);
  }
  return {};
}

} // namespace

void fault_injector::land(mine& m, std::int64_t step, bool inside) {
  const auto& s = m.s;
  const auto job = s.kind == fault_kind::suspend && !clock_ ? job_processes_here() : std::vector<pid_t>{};
  const auto what = strike_text(s, m.peers.size(), job.size(), clock_ != nullptr);
  if (clock_) // (the machine's time says nothing of a simulated run)
    log::info("rank {}: {} {} step {} ([[faults]] #{} kind = \"{}\", virtual time)",
      rank_, what, inside ? "in the computation of" : "after", step, s.entry + 1, to_string(s.kind));
  else
    log::info("rank {}: {} {} step {} ([[faults]] #{} kind = \"{}\", unix time {:.6f})",
      rank_, what, inside ? "in the computation of" : "after", step, s.entry + 1, to_string(s.kind), unix_s());
  std::fflush(stderr);
  switch (s.kind) {
  case fault_kind::kill:
    if (clock_) { // virtual time: the worker ends at this boundary (fault_hooks::killed)
      killed_ = "killed by [[faults]] #" + std::to_string(s.entry + 1) + " after step " + std::to_string(step) +
                " (virtual time)";
      break;
    }
    ::raise(SIGKILL); // as abrupt as kill -9: no report, no goodbye to the peers
    break;
  case fault_kind::stall:
    if (clock_) // virtual time: the worker's clock moves on, nothing sleeps
      clock_->charge(s.seconds);
    else if (links_)
      stall_process(s.seconds);
    else // one process: only this worker stalls
      std::this_thread::sleep_for(std::chrono::duration<double>(s.seconds));
    break;
  case fault_kind::slow:
    slow_factor_ = s.factor;
    slow_from_ = now_s();
    slow_until_ = slow_from_ + s.seconds;
    break;
  case fault_kind::suspend:
    if (clock_) // virtual time: every actor on its host, on the virtual clock
      clock_->suspend_host(rank_, s.seconds);
    else
      suspend_job(job, s.seconds); // every thread of these processes: workers, coordinator, transport
    break;
  case fault_kind::nan:
    nan_next_ = true;
    break;
  case fault_kind::delay:
  case fault_kind::drop:
  case fault_kind::partition:
    if (clock_ && !m.peers.empty()) // virtual time: the link model holds the messages
      clock_->impair_links(rank_, m.peers, s.seconds, s.delay_ms, s.kind != fault_kind::delay);
    else if (links_ && !m.peers.empty())
      links_->impair(m.peers, s.seconds, s.delay_ms, s.kind != fault_kind::delay);
    break;
  }
}

} // namespace gradwire::scheduler
