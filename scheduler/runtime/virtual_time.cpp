#include "scheduler/runtime/virtual_time.hpp"
#include "scheduler/runtime/virtual_reform.hpp"
#include "actors/worker_protocol.hpp"
#include "scheduler/runtime/virtual_placed.hpp"

#include "actors/messages.hpp"
#include "kernels/cpu/denormals.hpp"
#include "kernels/error.hpp"
#include "kernels/tensor.hpp"
#include "transport/buffer_pool.hpp"

#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>

namespace gradwire::scheduler {

namespace {

/// A placed actor's handle: its enqueue hands the message to the loop.
class virtual_handle final : public caf::monitorable_actor {
public:
  virtual_handle(caf::actor_config& cfg, std::weak_ptr<simulation> sim, placed_actor* to)
      : caf::monitorable_actor(cfg), sim_(std::move(sim)), to_(to) {}

  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit*) override {
    if (auto s = sim_.lock(); s && what)
      s->post(to_, std::move(what));
  }
  const char* name() const override { return "virtual_handle"; }

private:
  std::weak_ptr<simulation> sim_;
  placed_actor* to_;
};

caf::scheduler::test_coordinator& coordinator_of(caf::actor_system& sys) {
  auto* c = dynamic_cast<caf::scheduler::test_coordinator*>(&sys.scheduler());
  check(c != nullptr, "virtual time needs an actor system on CAF's test coordinator (configure_virtual)");
  return *c;
}

constexpr std::int64_t header_bytes = 64;

/// The bytes a message carries: its tensors, plus a header.
std::int64_t bytes_of(const caf::type_erased_tuple& content) {
  std::int64_t n = header_bytes;
  for (std::size_t i = 0; i < content.size(); ++i)
    if (content.match_element<actors::slice>(i))
      n += content.get_as<actors::slice>(i).numel() * static_cast<std::int64_t>(sizeof(float));
  return n;
}

std::string seconds_text(std::int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6f s", static_cast<double>(ns) * 1e-9);
  return b;
}

} // namespace

void configure_virtual(caf::actor_system_config& cfg) { cfg.set("scheduler.policy", caf::atom("testing")); }

std::shared_ptr<simulation> simulation::make(caf::actor_system& sys, virtual_setup setup) {
  coordinator_of(sys);
  check_virtual_setup(setup);
  return std::shared_ptr<simulation>(new simulation(sys, std::move(setup)));
}

simulation::simulation(caf::actor_system& sys, virtual_setup setup)
    : sys_(sys), setup_(std::move(setup)), origin_(std::chrono::steady_clock::now()),
      nic_tx_(static_cast<std::size_t>(setup_.hosts), 0), nic_rx_(static_cast<std::size_t>(setup_.hosts), 0),
      core_free_(static_cast<std::size_t>(setup_.hosts),
                 std::vector<std::int64_t>(static_cast<std::size_t>(setup_.cores_per_host), 0)),
      link_rng_(setup_.seed * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL) {}

simulation::~simulation() { stop(); }

caf::actor simulation::place(const caf::actor& real, int host, int worker_rank, int process) {
  check(!looping_ || std::this_thread::get_id() == loop_id_,
        "virtual time: actors are placed before the loop starts or from its thread");
  check(host >= 0 && host < setup_.hosts,
        "virtual time: host " + std::to_string(host) + " of " + std::to_string(setup_.hosts));
  auto p = std::make_unique<placed_actor>();
  p->real = real;
  p->host = host;
  p->rank = worker_rank;
  p->process = process >= 0 ? process : worker_rank;
  if (p->process < 0) { // a shard: in the process of the first worker on its host
    const auto& of = setup_.host_of;
    p->process = of.empty() ? host * setup_.workers_per_host
                            : static_cast<int>(std::find(of.begin(), of.end(), host) - of.begin());
  }
  caf::actor_config cfg;
  p->handle = caf::make_actor<virtual_handle, caf::actor>(sys_.next_actor_id(), sys_.node(), &sys_, cfg,
                                                          weak_from_this(), p.get());
  by_block_[caf::actor_cast<caf::actor_control_block*>(real)] = p.get();
  by_block_[caf::actor_cast<caf::actor_control_block*>(p->handle)] = p.get();
  if (worker_rank >= 0) {
    ++workers_;
    std::weak_ptr<simulation> w = weak_from_this();
    auto* raw = p.get();
    caf::actor_cast<caf::abstract_actor*>(real)->attach_functor([w, raw] {
      auto s = w.lock();
      if (!s || raw->down)
        return;
      raw->down = true;
      ++s->workers_down_;
      s->stats_.virtual_seconds = std::max(s->stats_.virtual_seconds, static_cast<double>(s->cur_now_) * 1e-9);
    });
  }
  placed_.push_back(std::move(p));
  return placed_.back()->handle;
}

placed_actor* simulation::find(const caf::actor_control_block* p) const {
  const auto it = by_block_.find(p);
  return it == by_block_.end() ? nullptr : it->second;
}

simulation::time_point simulation::now() const { return origin_ + std::chrono::nanoseconds(cur_now_); }

double simulation::charge_compute(int rank, std::int64_t step, double slowdown, double extra_seconds,
                                  double real_seconds) {
  const auto& model = setup_.compute[setup_.compute.size() == 1 ? 0 : static_cast<std::size_t>(rank) % setup_.compute.size()];
  auto it = rng_.find(rank);
  if (it == rng_.end())
    it = rng_.emplace(rank, std::mt19937_64(setup_.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(rank) * 7919 + 1)).first;
  const double d = model.draw(it->second, step) * slowdown + extra_seconds;
  cur_now_ += ns_of(d);
  stats_.compute_wall_seconds += real_seconds;
  stats_.handler_compute_wall_seconds += real_seconds;
  return d;
}

void simulation::offload(std::function<void()> work) {
  check(looping_ && std::this_thread::get_id() == loop_id_ && running_ != nullptr && !running_->job,
        "virtual time: offload() is for a placed actor's handler on the loop, one computation at a time");
  running_->job = compute_->submit(std::move(work));
  ++running_->jobs;
  running_->due_posted = false;
}

void simulation::settle(placed_actor* p) {
  const auto job = std::move(p->job);
  compute_->take(job, stats_.loop_compute_wall_seconds, stats_.wait_wall_seconds);
  stats_.compute_wall_seconds += job->seconds;
  p->real->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(caf::message_priority::high), {},
                                             actors::computed_atom::value),
                   nullptr);
  for (auto& ev : p->deferred) {
    events_.push_back(std::move(ev));
    std::push_heap(events_.begin(), events_.end());
  }
  p->deferred.clear();
}

void simulation::charge(double seconds) { cur_now_ += ns_of(std::max(0.0, seconds)); }

void simulation::charge_apply(std::int64_t bytes) {
  if (setup_.apply_gbps > 0)
    cur_now_ += ns_of(static_cast<double>(bytes) / (setup_.apply_gbps * 1e9));
}

void simulation::note_progress(int rank, std::int64_t samples) {
  if (budget_ <= 0 || budget_hit_)
    return;
  auto& mine = samples_[rank];
  budget_total_ += samples - mine;
  mine = samples;
  if (budget_total_ < budget_)
    return;
  budget_hit_ = true; // every worker finishes at its next step boundary, from now
  for (const auto& p : placed_)
    if (p->rank >= 0 && !p->down)
      caf::anon_send(actors::as_worker(p->real), actors::stop_atom::value);
}

void simulation::lose_worker(int rank) {
  if (reformer_) {
    actors::worker_report killed;
    killed.rank = rank;
    killed.error = "killed in virtual time";
    caf::anon_send(as_virtual_reformer(reformer_), actors::lost_atom::value, killed);
    return;
  }
  const auto n = reform_workers_.size();
  if (rank < 0 || static_cast<std::size_t>(rank) >= n)
    return;
  lost_.resize(n, false);
  lost_[static_cast<std::size_t>(rank)] = true;
  std::vector<std::int64_t> left;
  for (std::size_t r = 0; r < n; ++r)
    if (!lost_[r])
      left.push_back(static_cast<std::int64_t>(r));
  ++generation_;
  // Posted from the loop at the killed worker's time, in this order: every run the same events.
  for (const auto& s : reform_shards_)
    caf::anon_send(s, actors::reform_atom::value, generation_, left);
  for (auto r : left)
    caf::anon_send(actors::as_reform_taker(reform_workers_[static_cast<std::size_t>(r)]), actors::reform_atom::value,
                   generation_, left);
}

void simulation::note_eval(std::int64_t step, double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  evals_[step] = seconds;
}

double simulation::eval_seconds(std::int64_t step) const {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = evals_.find(step);
  return it == evals_.end() ? -1.0 : it->second;
}

void simulation::push(std::int64_t t, placed_actor* to, caf::mailbox_element_ptr m, std::uint64_t computed) {
  events_.push_back(virtual_event{t, seq_++, to, std::move(m), computed});
  std::push_heap(events_.begin(), events_.end());
}

void simulation::post(placed_actor* to, caf::mailbox_element_ptr m) {
  if (!looping_ || shut_) { // stopped: the caller's thread drives the scheduler now
    to->real->enqueue(std::move(m), nullptr);
    return;
  }
  if (std::this_thread::get_id() != loop_id_) { // the coordinator's thread (a stop, a fetch)
    std::lock_guard<std::mutex> lk(mu_);
    inbox_.emplace_back(to, std::move(m));
    cv_.notify_one();
    return;
  }
  auto* from = m->sender ? find(m->sender.get()) : nullptr;
  std::int64_t t = cur_now_;
  if (from) {
    m->sender = caf::actor_cast<caf::strong_actor_ptr>(from->handle); // its reply travels too
    const auto bytes = bytes_of(m->content());
    if (setup_.copy_gbps > 0 && bytes > header_bytes) // the sender copies the tensors in first
      cur_now_ += ns_of(static_cast<double>(bytes - header_bytes) / (setup_.copy_gbps * 1e9));
    t = arrival(from->host, to->host, bytes, cur_now_);
    if (!windows_.empty() && from->process != to->process)
      t = impaired(from->process, to->process, cur_now_, t);
    if (setup_.link.latency_cv > 0 || ordered_) { // one connection's messages keep their order
      auto& last = pair_last_[{from, to}];
      t = last = std::max(t, last);
    }
    ++stats_.messages;
    stats_.bytes += bytes;
    last_message_ = std::max(last_message_, t);
  }
  push(t, to, std::move(m));
}

void simulation::take_inbox() {
  std::vector<std::pair<placed_actor*, caf::mailbox_element_ptr>> in;
  {
    std::lock_guard<std::mutex> lk(mu_);
    in.swap(inbox_);
  }
  for (auto& [to, m] : in)
    push(now_, to, std::move(m));
}

void simulation::run_jobs(std::int64_t t) {
  auto& sched = coordinator_of(sys_);
  auto& clk = sched.clock();
  while (sched.has_job()) {
    auto* a = dynamic_cast<caf::abstract_actor*>(sched.jobs.front());
    auto* p = a ? find(caf::actor_control_block::from(a)) : nullptr;
    if (p && p->job) // a timer or a local message for an actor still computing: its result first
      settle(p);
    cur_now_ = p ? std::max(t, p->busy_until) : t;
    // cores_per_host: the handler runs on the core of its host that frees
    // up first (ties to the lowest), from then to the end of what it was
    // charged; the others wait, first come first served.
    std::int64_t* core = nullptr;
    if (p && setup_.cores_per_host > 0) {
      auto& cores = core_free_[static_cast<std::size_t>(p->host)];
      core = &*std::min_element(cores.begin(), cores.end());
      cur_now_ = std::max(cur_now_, *core);
    }
    clk.current_time = origin_ + std::chrono::nanoseconds(cur_now_);
    const auto w0 = std::chrono::steady_clock::now();
    running_ = p;
    sched.run_once();
    running_ = nullptr;
    stats_.handler_wall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    ++stats_.events;
    if (core)
      *core = cur_now_;
    if (p)
      p->busy_until = cur_now_;
    if (p && p->job && !p->due_posted) { // it offloaded: its result is due when its clock is
      push(cur_now_, p, nullptr, p->jobs);
      p->due_posted = true;
    }
  }
  cur_now_ = now_;
}

void simulation::report_stuck(const std::string& why) {
  stuck_ = true;
  for (const auto& p : placed_)
    if (p->rank >= 0 && !p->down && on_stuck_)
      on_stuck_(p->rank, why);
}

void simulation::start() {
  check(!looping_ && !thread_.joinable(), "virtual time: the loop runs once");
  // Host buffers from 64 KiB come from a pool while the loop runs. A
  // thousand workers keep a thousand gradients and replies in flight, each
  // freed and allocated again every step: from glibc's heap that
  // fragmented (a 1,024-worker run grew past 24 GiB), and from mmap each
  // buffer paid its page faults again (a quarter of the loop's time).
  // Ordinary pages: a huge one per buffer of a megabyte doubled the run's
  // memory.
  pool_ = std::make_shared<transport::buffer_pool>(1024, SIZE_MAX);
  kernels::set_host_allocator(
    [pool = pool_](std::size_t bytes, std::size_t) { return pool->get((bytes + 3) / 4).shared_storage(); },
    std::size_t{64} << 10);
  compute_ = std::make_unique<compute_pool>(std::max(1, setup_.threads) - 1);
  stats_.threads = std::max(1, setup_.threads);
  looping_ = true;
  // The loop's id is known before it runs: post() and place() on either
  // thread read it without a race.
  std::promise<void> go;
  thread_ = std::thread([this, ready = go.get_future()] {
    ready.wait();
    loop();
  });
  loop_id_ = thread_.get_id();
  go.set_value();
}

void simulation::loop() {
  const auto wall0 = std::chrono::steady_clock::now();
  // From the first event on, as on compute_pool's threads: a gradient's
  // bits must not depend on which thread computed it.
  kernels::flush_denormals_on_this_thread();
  auto& sched = coordinator_of(sys_);
  auto& clk = sched.clock();
  clk.current_time = origin_;
  run_jobs(0); // every spawned actor starts at time 0
  // Once every worker is done, messages still in flight (a push sent before
  // a shared budget's stop) are delivered before the loop stops, so what
  // the shards hold does not depend on when the caller stopped it.
  while (!stop_ || (workers_ > 0 && workers_down_ == workers_ && !events_.empty())) {
    take_inbox();
    const auto& timers = clk.schedule();
    const bool running = workers_down_ < workers_ && !stuck_;
    const bool timer_first = running && !timers.empty() &&
                             (events_.empty() || timers.begin()->first - origin_ < std::chrono::nanoseconds(events_.front().t));
    if (timer_first) {
      const auto t = std::max(now_, static_cast<std::int64_t>(
                                      std::chrono::duration_cast<std::chrono::nanoseconds>(timers.begin()->first - origin_).count()));
      if (events_.empty() && t - last_message_ > ns_of(setup_.stuck_after_s)) {
        report_stuck("no message in flight for " + seconds_text(t - last_message_) + " of virtual time (at " +
                     seconds_text(now_) + ")");
        continue;
      }
      now_ = t;
      clk.current_time = origin_ + std::chrono::nanoseconds(now_);
      clk.trigger_timeout();
      run_jobs(now_);
      continue;
    }
    if (!events_.empty()) {
      deliver_next();
      continue;
    }
    if (running) {
      report_stuck("nothing left to happen at " + seconds_text(now_) + " of virtual time");
      continue;
    }
    std::unique_lock<std::mutex> lk(mu_); // the run is over or stuck: wait for the coordinator's messages
    cv_.wait_for(lk, std::chrono::milliseconds(50), [this] { return stop_ || !inbox_.empty(); });
  }
  stats_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
}

void simulation::deliver_next() {
  std::pop_heap(events_.begin(), events_.end());
  auto ev = std::move(events_.back());
  events_.pop_back();
  auto* p = ev.to;
  if (ev.computed != 0) { // an offloaded computation is due (unless something else took it first)
    if (!p->job || ev.computed != p->jobs)
      return;
    now_ = std::max(now_, ev.t);
    settle(p);
    run_jobs(now_);
    return;
  }
  if (p->job) { // it is still computing: the message waits for its result
    p->deferred.push_back(std::move(ev));
    return;
  }
  if (p->busy_until > ev.t) { // it is still busy: the message waits in its mailbox
    ev.t = p->busy_until;
    events_.push_back(std::move(ev));
    std::push_heap(events_.begin(), events_.end());
    return;
  }
  now_ = std::max(now_, ev.t);
  cur_now_ = now_;
  coordinator_of(sys_).clock().current_time = origin_ + std::chrono::nanoseconds(now_);
  p->real->enqueue(std::move(ev.m), nullptr);
  run_jobs(now_);
}

void simulation::stop() {
  if (!thread_.joinable())
    return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& p : placed_) // a run stopped mid-step (stuck): its computations end before their actors can
    if (p->job) {
      double ran = 0, waited = 0;
      compute_->take(p->job, ran, waited);
      p->job = nullptr;
    }
  compute_.reset();
  kernels::set_host_allocator({}, 0); // buffers out keep the pool until they are freed
  looping_ = false;
  cur_now_ = now_;
}

void simulation::drain() {
  check(!thread_.joinable(), "virtual time: drain() after stop()");
  auto& sched = coordinator_of(sys_);
  while (sched.try_run_once())
    ;
}

void simulation::shut_down() {
  if (shut_ || thread_.joinable())
    return;
  shut_ = true;
  take_inbox();
  events_.clear(); // never delivered
  for (const auto& p : placed_)
    if (p->real)
      caf::anon_send_exit(p->real, caf::exit_reason::user_shutdown);
  drain();
  by_block_.clear();
  for (auto& p : placed_)
    p->real = nullptr; // the handles may outlive this; the actors are gone
}

} // namespace gradwire::scheduler
