#include "actors/system_config.hpp"

#include <cstddef>

namespace gradwire::actors {

// CAF 0.17's work-stealing scheduler lets an idle thread poll in three
// phases: aggressive (100 busy attempts), moderate (500 attempts, each a
// plain sleep_for(50 us)) and relaxed (a condition variable that an
// enqueue notifies, with a timeout for stealing). In the moderate phase,
// 25 ms after every job, the thread neither hears an enqueue nor gives
// its CPU up for long: a message to an actor waits out the rest of a
// 50 us sleep (every hop of an allreduce across processes pays it), and
// 20,000 wake-ups a second per thread land on the cores the compute
// threads need. So the moderate phase is skipped: idle threads sleep until
// an enqueue wakes them (its effect on allreduce and training is in
// bench/RESULTS.md, "Measured effects"). A job left in a busy thread's own
// queue is stolen at the relaxed timeout: CAF's 10 ms is kept, as shorter
// timeouts were no better at 2 processes (the same section).
void configure_scheduler(caf::actor_system_config& cfg, int threads) {
  cfg.set("scheduler.max-threads", threads);
  cfg.set("work-stealing.moderate-poll-attempts", std::size_t{0});
}

} // namespace gradwire::actors
