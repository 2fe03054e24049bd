#pragma once
/// @file virtual_time.hpp
/// Virtual time (experiment.clock = "virtual"): the same worker and shard
/// actors, the same messages, run by a deterministic discrete-event loop
/// instead of the machine's clock and threads, so one machine can study
/// hundreds of workers.
///
/// - **Scheduler.** The actor system runs CAF's test coordinator (a job
///   queue run one job at a time, `configure_virtual`). The loop, on a
///   thread of its own, takes the earliest event, a message or a timer in
///   (virtual time, order posted), delivers it and runs the actors it wakes
///   to completion before the next. Nothing else runs them, so a run is a
///   function of its config and seed: bit-identical parameters and
///   staleness on an idle machine or a loaded one.
/// - **Messages.** Every actor whose messages cross the modelled network is
///   `place`d on a host; the others hold the handle `place` returns. A
///   message through it leaves when its sender's handler has used the time
///   it was charged, and arrives after the link model's delay (link_model).
/// - **Compute.** A worker computes its gradient for real, and the clock
///   charges the compute model's time for it (compute_model); an actor
///   busy until t takes its next message at t. A worker hands its
///   gradient to the loop (`offload`), which computes it on one
///   of `threads` (compute_pool) while other actors' events go on, and
///   gives the worker (computed_atom) when its compute time is up, before
///   any other message: the events, their order and every bit are those of
///   one thread.
/// - **Timers.** CAF's test clock is kept at the loop's time: heartbeats
///   and request timeouts fire in virtual time.
/// - **Stuck.** No message in flight, only timers, for `stuck_after_s`
///   (or nothing at all) while workers still run: each is reported to
///   `on_stuck`, and the run fails naming them.

#include "actors/shard_protocol.hpp"
#include "actors/virtual_clock.hpp"
#include "scheduler/runtime/compute_pool.hpp"
#include "transport/buffer_pool.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gradwire::scheduler {

/// How long a worker's batch computes, in virtual seconds.
struct compute_model {
  enum class shape { constant, lognormal, straggler };
  double step_s = 1e-3; ///< mean seconds per batch at full speed (> 0)
  shape dist = shape::constant;
  double cv = 0;          ///< lognormal: coefficient of variation (std / mean)
  double straggler_p = 0; ///< straggler: a step is straggler_k times slower with this probability
  double straggler_k = 1;
  /// Seconds per step, cycled (a real run's measured steps); not empty:
  /// replaces step_s and dist.
  std::vector<double> replay;
  /// The seconds of step `step`, drawn from `rng` (a worker's own stream).
  double draw(std::mt19937_64& rng, std::int64_t step) const;
  std::string describe() const;
};

/// Lognormal with this mean and std cv * mean (sigma^2 = ln(1 + cv^2),
/// mu = ln(mean) - sigma^2 / 2, Box-Muller for the normal), from the raw
/// stream: the same bits on every build.
double draw_lognormal(std::mt19937_64& rng, double mean, double cv);

/// How long a message of S bytes takes. Within a host: latency + S /
/// bandwidth. Between hosts, each host has one NIC that sends one message
/// after another and receives one after another (`nic`): a message leaves
/// once its host's NIC is free, takes S / bandwidth to leave, and arrives
/// `latency` later or once the receiving NIC has taken the messages ahead
/// of it, whichever is last. Bandwidth 0: unlimited.
struct link_model {
  double latency_us = 0, bandwidth_gbps = 0;             ///< between hosts
  double intra_latency_us = 0, intra_bandwidth_gbps = 0; ///< within a host
  /// Each message's latency (either kind) drawn lognormal with this
  /// coefficient of variation around its mean, from the run's seed (0: the
  /// latency exactly). Messages from one actor to another still arrive in
  /// the order sent, as on a real connection.
  double latency_cv = 0;
  bool nic = true;
  /// Set: each host's NIC in Gb/s, by host, in place of bandwidth_gbps; a
  /// message between two hosts moves at the slower one's rate.
  std::vector<double> host_gbps;
  std::string describe() const;
};

struct virtual_setup {
  std::vector<compute_model> compute; ///< by worker rank; one entry: every worker's
  link_model link;
  int workers_per_host = 1; ///< worker r lives on host r / workers_per_host
  int hosts = 1;
  /// Set: worker r lives on host host_of[r] (hosts of different sizes),
  /// in place of workers_per_host.
  std::vector<int> host_of;
  /// Handlers a host runs at once (0: no limit, each actor has a processor
  /// of its own). A message whose actor finds every core of its host busy
  /// (a worker computing holds one for its compute time) waits for the
  /// first to free up, first come first served: the model of several
  /// workers and a shard sharing one machine's cores, as a real run on a
  /// small machine does, where CAF runs `cores` actors at a time.
  int cores_per_host = 0;
  /// A parameter-server shard applying a gradient of S bytes is busy for
  /// S / (apply_gbps * 1e9) seconds: a pull that arrives meanwhile waits
  /// and reads the result (0: applying is instant).
  double apply_gbps = 0;
  /// An actor sending a message that carries S bytes of tensors is busy for
  /// S / (copy_gbps * 1e9) seconds first, copying them in (a worker's
  /// gradient into its push, a shard's parameters into a pull's reply), and
  /// the message leaves after (0: copies are free).
  double copy_gbps = 0;
  /// train.restarts: a killed worker's new process asks to come back this
  /// many seconds after the kill (virtual_reform.hpp).
  double restart_s = 2;
  std::uint64_t seed = 1;
  double stuck_after_s = 600; ///< virtual seconds with no message in flight
  /// Threads that compute offloaded gradients, the loop's own included
  /// (1: the loop computes each when it is due).
  int threads = 1;
};

/// What the simulation cost, and what it simulated.
struct virtual_stats {
  double virtual_seconds = 0;      ///< when the last worker finished
  double wall_seconds = 0;         ///< the loop's, start to stop
  double handler_wall_seconds = 0; ///< of it, inside the actors' handlers
  double compute_wall_seconds = 0; ///< computing gradients, on any thread
  double handler_compute_wall_seconds = 0; ///< of that, inside handlers (workers that do not offload)
  double loop_compute_wall_seconds = 0;    ///< of that, offloaded ones the loop ran itself
  double wait_wall_seconds = 0;            ///< the loop waiting for a helper's gradient
  int threads = 1;
  std::int64_t events = 0;         ///< handlers run (messages, timers, self-sends)
  std::int64_t messages = 0;       ///< through the link model
  std::int64_t bytes = 0;
};

/// Seconds as the loop's nanoseconds, rounded.
constexpr std::int64_t ns_of(double seconds) { return static_cast<std::int64_t>(seconds * 1e9 + 0.5); }

/// Throws gradwire::error naming the first setting out of range (a step
/// time, a host, a rate); simulation::make calls it.
void check_virtual_setup(const virtual_setup& setup);

/// A message for a placed actor, waiting for its time.
struct virtual_event;
struct placed_actor;

class simulation final : public actors::virtual_clock, public std::enable_shared_from_this<simulation> {
public:
  /// `sys` must run CAF's test coordinator (configure_virtual); throws
  /// gradwire::error otherwise, or on a bad setup.
  static std::shared_ptr<simulation> make(caf::actor_system& sys, virtual_setup setup);
  ~simulation() override;

  const virtual_setup& setup() const { return setup_; }
  int host_of_worker(int rank) const {
    return setup_.host_of.empty() ? rank / setup_.workers_per_host : setup_.host_of[static_cast<std::size_t>(rank)];
  }
  /// Places `real` (spawned in the system; before the loop starts, or by a
  /// handler on the loop's thread) on `host`; returns the handle every other actor must use for it. A
  /// message through it is delivered after the link model's delay, with its
  /// sender replaced by the sender's handle, so that replies travel too.
  /// `worker_rank` >= 0: the run is over once every worker has terminated.
  /// Its process, for link faults: `process`, or worker_rank's, or (a
  /// shard) the first worker's on its host.
  caf::actor place(const caf::actor& real, int host, int worker_rank = -1, int process = -1);
  /// Called on the loop's thread, once, for each worker still running when
  /// the run is stuck.
  void on_stuck(std::function<void(int rank, const std::string& why)> f) { on_stuck_ = std::move(f); }
  /// Starts the loop on its own thread (the spawned actors start at time 0).
  void start();
  /// Stops the loop and joins it (when every worker is done, after the
  /// messages still in flight are delivered); from then on the calling
  /// thread drives the scheduler, and messages through placed handles go
  /// straight in.
  void stop();
  /// After stop: runs every queued job on the calling thread (a scoped
  /// actor's request to a placed actor is answered when it returns).
  void drain();
  /// After stop: every placed actor is told to exit and has, and messages
  /// never delivered are dropped. Idempotent.
  void shut_down();
  /// After stop.
  const virtual_stats& stats() const { return stats_; }
  /// When worker 0 handed over its replica of `step` (note_eval); -1: never.
  double eval_seconds(std::int64_t step) const;

  time_point now() const override;
  double charge_compute(int rank, std::int64_t step, double slowdown, double extra_seconds,
                        double real_seconds) override;
  void note_eval(std::int64_t step, double seconds) override;
  void charge(double seconds) override;
  void charge_apply(std::int64_t bytes) override;
  void note_progress(int rank, std::int64_t samples) override;
  void offload(std::function<void()> work) override;
  /// A shared budget (train.budget = "shared"): once the workers' samples
  /// add up to it, in virtual-time order, every worker still running is
  /// told to finish (done_atom) at that moment. 0: none.
  void set_budget(std::int64_t samples) { budget_ = samples; }
  /// Who hears of a killed worker (lose_worker): the shards, then every
  /// worker by rank (placed handles). Unset: no one (only the coordinator).
  void set_reform_targets(std::vector<actors::shard_actor> shards, std::vector<caf::actor> workers) {
    reform_shards_ = std::move(shards);
    reform_workers_ = std::move(workers);
  }
  /// An elastic ring's re-form runs in this placed actor
  /// (virtual_reform.hpp): a killed worker is reported to it alone.
  void set_reformer(caf::actor reformer) { reformer_ = std::move(reformer); }
  void lose_worker(int rank) override;
  bool budget_reached() const { return budget_hit_; }
  caf::actor place_beside(int rank, const caf::actor& spawned) override {
    return place(spawned, host_of_worker(rank), -1, rank);
  }
  void impair_links(int rank, const std::vector<int>& peers, double seconds, double delay_ms, bool down) override;
  void suspend_host(int rank, double seconds) override;

  /// From a placed actor's handle: `m` for `to`.
  void post(placed_actor* to, caf::mailbox_element_ptr m);

private:
  simulation(caf::actor_system& sys, virtual_setup setup);
  void loop();
  void run_jobs(std::int64_t t);
  void push(std::int64_t t, placed_actor* to, caf::mailbox_element_ptr m, std::uint64_t computed = 0);
  /// `p`'s offloaded computation is taken (run here, or awaited) and p gets
  /// (computed_atom) ahead of anything in its mailbox; what waited for it
  /// goes back into the heap.
  void settle(placed_actor* p);
  /// Pops the earliest event and delivers it (or holds it for its actor).
  void deliver_next();
  std::int64_t arrival(int from_host, int to_host, std::int64_t bytes, std::int64_t t);
  /// A message between two processes sent at `sent`, due at `due`, under
  /// the link faults' windows open then.
  std::int64_t impaired(int from, int to, std::int64_t sent, std::int64_t due);
  std::int64_t latency_ns(double mean_us);
  void take_inbox();
  void report_stuck(const std::string& why);
  placed_actor* find(const caf::actor_control_block* p) const;

  caf::actor_system& sys_;
  virtual_setup setup_;
  time_point origin_;
  std::vector<std::unique_ptr<placed_actor>> placed_;
  std::unordered_map<const caf::actor_control_block*, placed_actor*> by_block_; ///< real actors and their handles
  std::vector<virtual_event> events_; ///< a heap, earliest first
  std::uint64_t seq_ = 0;
  std::int64_t now_ = 0;     ///< ns: the loop's time
  std::int64_t cur_now_ = 0; ///< ns: the running actor's time
  placed_actor* running_ = nullptr; ///< the placed actor whose handler runs
  std::int64_t last_message_ = 0;
  std::vector<std::int64_t> nic_tx_, nic_rx_;
  std::vector<std::vector<std::int64_t>> core_free_; ///< by host: when each core is free (cores_per_host)
  std::map<int, std::mt19937_64> rng_; ///< by worker rank
  std::mt19937_64 link_rng_;           ///< latency_cv's draws, in the order messages are sent
  std::map<std::pair<const placed_actor*, const placed_actor*>, std::int64_t> pair_last_; ///< latency_cv: FIFO per pair
  int workers_ = 0, workers_down_ = 0;
  std::function<void(int, const std::string&)> on_stuck_;
  bool stuck_ = false;
  virtual_stats stats_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> looping_{false};
  std::thread::id loop_id_;
  mutable std::mutex mu_; ///< inbox_, evals_
  std::condition_variable cv_;
  std::vector<std::pair<placed_actor*, caf::mailbox_element_ptr>> inbox_;
  std::map<std::int64_t, double> evals_;
  bool shut_ = false;
  std::shared_ptr<transport::buffer_pool> pool_; ///< host buffers while the loop runs
  std::unique_ptr<compute_pool> compute_;        ///< while the loop runs
  std::int64_t budget_ = 0, budget_total_ = 0;
  std::map<int, std::int64_t> samples_; ///< by worker rank, for the budget
  bool budget_hit_ = false;
  std::vector<actors::shard_actor> reform_shards_;
  std::vector<caf::actor> reform_workers_;
  caf::actor reformer_;
  std::vector<bool> lost_; ///< by rank: killed (lose_worker)
  /// Link faults (impair_links), in the order they landed.
  struct link_window {
    int from;
    std::vector<int> to; ///< sorted
    std::int64_t begin, end, delay;
    bool down;
  };
  std::vector<link_window> windows_;
  bool ordered_ = false; ///< a window has opened: every connection is kept in order from then on
  int generation_ = 0;
};

/// An actor-system config for virtual time: CAF's deterministic test
/// coordinator instead of its threads.
void configure_virtual(caf::actor_system_config& cfg);

} // namespace gradwire::scheduler
