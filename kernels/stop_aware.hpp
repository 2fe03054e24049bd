#pragma once
/// @file stop_aware.hpp
/// Waits that a stop of this process does not use up.
///
/// A process that does not run for a while finds every deadline past when
/// it runs again: stopped (SIGSTOP or SIGTSTP: SLURM's `scontrol suspend`
/// and gang scheduling, Ctrl-Z, a debugger, the [[faults]] stall), or
/// frozen with its VM. Its workers, peers and their replies were stopped
/// with it, or were waiting on it: the silence was its own. Every watchdog
/// that judges a peer by a timeout measures with waited(), which counts
/// from the end of this process's last stop when that came later than the
/// wait's start: each peer gets a fresh timeout, and the messages queued
/// meanwhile are read before anyone is judged gone.
///
/// How a stop is seen: a thread of this process looks at the clock every
/// 20 ms. Two of its looks more than 250 ms apart mean it did not run: the
/// process was stopped. (Starved of the CPU that long, it is the same to a
/// watchdog: this process, not the peer, was not running.) A waited() that
/// finds that thread overdue waits up to 200 ms for its next look, so a
/// stop that just ended is seen before anyone is judged. No signal handler
/// is involved, so no system call is interrupted; a child after fork()
/// starts a looking thread of its own.

#include <chrono>

namespace gradwire::kernels {

/// Two looks at the clock further apart than this: this process was stopped.
constexpr std::chrono::milliseconds stop_gap{250};

/// When this process last ran again after a stop (steady_clock); the
/// clock's epoch if it has not stopped since it started watching.
std::chrono::steady_clock::time_point last_stop_end();

/// How long that stop lasted (as far as the looks tell), for messages.
std::chrono::steady_clock::duration last_stop_length();

/// How long a wait begun at `since` has lasted while this process ran:
/// steady time since `since`, or since the end of the last stop if later.
std::chrono::steady_clock::duration waited(std::chrono::steady_clock::time_point since);

/// How long this process ran since `since`: steady time less the part of
/// the last stop that came after `since`. For what a step measures and
/// then acts on (an emulated slowdown's sleep, batch balancing's speeds):
/// a stop in the middle of a computation is no computing. (A stop reads
/// up to one look, 20 ms, longer than it was; only the last stop is known,
/// so two within one measurement count as one.)
std::chrono::steady_clock::duration ran(std::chrono::steady_clock::time_point since);

/// waited(since) > limit, in whole milliseconds.
inline bool waited_longer(std::chrono::steady_clock::time_point since, std::chrono::milliseconds limit) {
  return waited(since) > limit;
}

/// Starts watching (the first waited() does too): call it before the
/// waits begin (a run's start, a collective's), so that a stop during the
/// first of them is seen.
void watch_stops();

} // namespace gradwire::kernels
