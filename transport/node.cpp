#include "transport/node.hpp"
#include "kernels/log.hpp"

#include "actors/messages.hpp"

#include <chrono>
#include <cstdio>
#include <deque>

namespace gradwire::transport {

namespace {

/// The liveness thread's heartbeat frame (peer_watch.hpp): it says nothing
/// but that its sender runs.
using heartbeat_atom = caf::atom_constant<caf::atom("gwbeat")>;

/// A handle to an actor in another process. Its enqueue encodes and sends
/// on the sender's own thread: no mailbox, no scheduling hop (as CAF's own
/// forwarding proxies do for its network layer).
class proxy_actor final : public caf::monitorable_actor {
public:
  proxy_actor(caf::actor_config& cfg, std::weak_ptr<transport::node> n, int rank, std::uint32_t slot)
      : caf::monitorable_actor(cfg), node_(std::move(n)), rank_(rank), slot_(slot) {}

  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit*) override {
    if (!what)
      return;
    auto n = node_.lock();
    std::string failure;
    if (!n)
      failure = "the transport is closed";
    else
      try {
        if (what->mid.is_request())
          n->forward_request(rank_, slot_, what->sender, what->mid, what->move_content_to_message());
        else
          n->forward(rank_, slot_, what->sender, what->move_content_to_message());
        return;
      } catch (const std::exception& e) {
        failure = e.what();
      }
    const auto text = "message to rank " + std::to_string(rank_) + " slot " + std::to_string(slot_) + ": " + failure;
    if (what->mid.is_request() && what->sender)
      what->sender->enqueue(caf::make_mailbox_element(nullptr, what->mid.response_id(), {},
                                                      caf::make_error(caf::sec::feature_disabled, text)),
                            nullptr);
    else if (n)
      n->note_failure(text);
  }

  const char* name() const override { return "remote_proxy"; }

private:
  std::weak_ptr<transport::node> node_;
  int rank_;
  std::uint32_t slot_;
};

/// Stands in for a remote requester: a request from rank `rank` is
/// delivered with this actor as its sender, so the handler's reply (or
/// error) lands in this enqueue, which sends it back as a reply frame.
class reply_catcher final : public caf::monitorable_actor {
public:
  reply_catcher(caf::actor_config& cfg, std::weak_ptr<transport::node> n, int rank)
      : caf::monitorable_actor(cfg), node_(std::move(n)), rank_(rank) {}

  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit*) override {
    auto n = node_.lock();
    if (!what || !n || !what->mid.is_response())
      return;
    const auto id = what->mid.request_id().integer_value() & caf::message_id::request_id_mask;
    n->send_reply(rank_, id, what->move_content_to_message());
  }

  const char* name() const override { return "remote_reply"; }

private:
  std::weak_ptr<transport::node> node_;
  int rank_;
};

/// Runs the actors that arriving frames wake on the link's receive thread,
/// as a CAF worker would (and actors they wake in turn), so a hop through
/// a ring peer costs no thread hand-off: on a machine with fewer cores
/// than threads, each hand-off is a wake-up of tens to hundreds of us.
/// Detached actors (workers) still wake on their own threads.
class inline_unit final : public caf::execution_unit {
public:
  explicit inline_unit(caf::actor_system* sys) : caf::execution_unit(sys) {}
  void exec_later(caf::resumable* job) override { queue_.push_back(job); }
  void run() {
    while (!queue_.empty()) {
      auto* job = queue_.front();
      queue_.pop_front();
      switch (job->resume(this, 64)) {
      case caf::resumable::resume_later: queue_.push_back(job); break;
      default: intrusive_ptr_release(job); break; // the reference exec_later's caller took
      }
    }
  }

private:
  std::deque<caf::resumable*> queue_;
};

} // namespace

node::node(caf::actor_system& sys, std::unique_ptr<link> l, const std::string& token)
    : sys_(sys), link_(std::move(l)), unit_(std::make_unique<inline_unit>(&sys)), budget_(link_->size()),
      watch_(link_->size(), link_->rank()) {
  ctx_.token = token_hash(token);
  ctx_.rank = link_->rank();
  cut_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(link_->size())); // all false
}

node::~node() { close(1000); }

bool node::is_down(int r) {
  std::lock_guard<std::mutex> lk(down_mu_);
  return r >= 0 && static_cast<std::size_t>(r) < down_.size() && down_[static_cast<std::size_t>(r)];
}

bool node::is_cut_off(int r) const {
  return r >= 0 && r < size() && cut_[static_cast<std::size_t>(r)].load(std::memory_order_acquire);
}

void node::cut_off(int peer, const std::string& why) {
  check(peer >= 0 && peer < size() && peer != rank(), "node::cut_off: no peer rank " + std::to_string(peer));
  cut_[static_cast<std::size_t>(peer)].store(true, std::memory_order_release);
  peer_down(peer, "cut off: " + why);
}

void node::control(int peer, const caf::message& msg) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_)
      return;
  }
  try {
    forward(peer, slots::fence, nullptr, msg);
  } catch (const std::exception&) {
    // its link has failed: it hears of it from the liveness bound
  }
}

void node::fence(int peer, const std::string& why) { control(peer, caf::make_message(why)); }

void node::readmit(int peer) {
  if (peer < 0 || peer >= size() || peer == rank())
    return;
  watch_.heard(peer);
  {
    std::lock_guard<std::mutex> lk(down_mu_);
    down_[static_cast<std::size_t>(peer)] = false;
    finished_[static_cast<std::size_t>(peer)] = false; // a new process
  }
  cut_[static_cast<std::size_t>(peer)].store(false, std::memory_order_release);
}

void node::fence_all(const std::string& why) {
  for (int r = 0; r < size(); ++r)
    if (r != rank() && !is_down(r))
      fence(r, why);
}

void node::finished(int peer) {
  std::lock_guard<std::mutex> lk(down_mu_);
  if (peer >= 0 && static_cast<std::size_t>(peer) < finished_.size())
    finished_[static_cast<std::size_t>(peer)] = true;
}

void node::peer_down(int peer, const std::string& what) {
  bool expected = ending_;
  {
    std::lock_guard<std::mutex> lk(down_mu_);
    if (down_[static_cast<std::size_t>(peer)])
      return;
    down_[static_cast<std::size_t>(peer)] = true;
    expected = expected || finished_[static_cast<std::size_t>(peer)];
  }
  if (!expected)
    log::warn("rank {}: peer rank {} is gone: {}", rank(), peer, what);
  link_->forget(peer); // what is held for it is not sent after all
  // Rank 0 tells a peer it has given up on (the fence): one that was only
  // silent (stalled, or behind a link that was down) and comes back leaves
  // the job instead of waiting forever for peers that went on without it.
  if (rank() == 0)
    fence(peer, "rank 0 cut this rank off (" + (what.rfind("cut off: ", 0) == 0 ? what.substr(9) : what) + ")");
  std::vector<pending_request> failed; // requests to it will never be answered
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = pending_.begin(); it != pending_.end();)
      if (it->second.rank == peer) {
        failed.push_back(it->second);
        it = pending_.erase(it);
      } else
        ++it;
  }
  for (const auto& p : failed)
    answer(p, caf::make_message(caf::make_error(caf::sec::runtime_error,
                                                "rank " + std::to_string(peer) + " is gone: " + what)));
  if (on_down_)
    on_down_(peer, what);
}

void node::start(down_fn on_down, liveness live) {
  on_down_ = std::move(on_down);
  down_.assign(static_cast<std::size_t>(size()), false);
  finished_.assign(static_cast<std::size_t>(size()), false);
  link::handlers h;
  h.receive = [this](const void* header, std::size_t bytes, kernels::tensor data) {
    on_frame(header, bytes, std::move(data));
  };
  h.peer_error = [this](int peer, const std::string& what) { peer_down(peer, what); };
  h.rejected = [this](const std::string& what) { reject(what); };
  link_->start(std::move(h));
  if (size() == 1)
    return;
  watch_.start(live, watch_hooks());
}

peer_watch::hooks node::watch_hooks() {
  peer_watch::hooks h;
  h.down = [this](int r) {
    std::lock_guard<std::mutex> lk(down_mu_);
    return static_cast<bool>(down_[static_cast<std::size_t>(r)]);
  };
  h.silent = [this](int r, const std::string& why) {
    // Down for good: if it was only silent and comes back, it is not heard again.
    cut_[static_cast<std::size_t>(r)].store(true, std::memory_order_release);
    peer_down(r, why);
  };
  h.beat = [this, beat = caf::make_message(heartbeat_atom::value)](int r) {
    try {
      forward(r, slots::heartbeat, nullptr, beat);
    } catch (const std::exception& e) {
      reject(e.what());
    }
  };
  return h;
}

void node::note_failure(const std::string& what) { reject(what); }

void node::reject(const std::string& what) {
  const auto n = ++rejected_;
  if (n <= 20) // bounded log: a flood of garbage must not flood stderr
    log::warn("rank {}: {}", rank(), what);
}

void node::publish(std::uint32_t slot, caf::actor a) {
  check(slot < next_slot_, "slot " + std::to_string(slot) + " is reserved");
  std::lock_guard<std::mutex> lk(mu_);
  slot_of_[a.address()] = slot;
  published_[slot] = std::move(a);
}

caf::actor node::remote(int r, std::uint32_t slot) {
  GW_CHECK(r >= 0 && r < size(), "no rank " + std::to_string(r) + " in a job of " + std::to_string(size()));
  std::lock_guard<std::mutex> lk(mu_);
  if (r == rank()) {
    auto it = published_.find(slot);
    GW_CHECK(it != published_.end(), "rank " + std::to_string(r) + " has nothing in slot " + std::to_string(slot));
    return it->second;
  }
  auto& p = proxies_[{r, slot}];
  if (!p) {
    caf::actor_config cfg;
    p = caf::make_actor<proxy_actor, caf::actor>(sys_.next_actor_id(), sys_.node(), &sys_, cfg, weak_from_this(), r,
                                                 slot);
    proxy_ref_[p.address()] = {r, slot};
  }
  return p;
}

actor_ref node::ref_of(const caf::strong_actor_ptr& p) {
  if (!p)
    return {};
  return ref_of(caf::actor_cast<caf::actor>(p));
}

actor_ref node::ref_of(const caf::actor& a) {
  if (!a)
    return {};
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = proxy_ref_.find(a.address()); it != proxy_ref_.end())
    return it->second;
  auto it = slot_of_.find(a.address());
  if (it == slot_of_.end()) { // an actor named in a message: give it a slot
    it = slot_of_.emplace(a.address(), next_slot_++).first;
    published_[it->second] = a;
  }
  return {rank(), it->second};
}

caf::actor node::resolve(actor_ref r) {
  if (r.rank < 0)
    return {};
  if (r.rank >= size())
    throw frame_error("actor reference to rank " + std::to_string(r.rank) + " of " + std::to_string(size()));
  if (r.rank == rank()) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = published_.find(r.slot);
    if (it == published_.end())
      throw frame_error("actor reference to slot " + std::to_string(r.slot) + ", nothing there");
    return it->second;
  }
  return remote(r.rank, r.slot);
}

namespace {

/// Whether `msg`'s tensor may travel as a view of this process's memory:
/// declared per message in actors/messages.hpp's message table.
bool may_reference(const caf::message& msg) {
  if (msg.size() == 0 || !msg.match_element<caf::atom_value>(0))
    return false;
  return actors::travels_by_reference(msg.get_as<caf::atom_value>(0));
}

} // namespace

void node::forward(int r, std::uint32_t slot, const caf::strong_actor_ptr& sender, const caf::message& msg) {
  auto f = encode(msg, ctx_, slot, ref_of(sender), [this](const caf::actor& a) { return ref_of(a); });
  link_->send(r, std::move(f.header), std::move(f.data), may_reference(msg));
}

void node::forward_request(int r, std::uint32_t slot, const caf::strong_actor_ptr& sender, caf::message_id mid,
                           const caf::message& msg) {
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    id = next_request_++;
    pending_[id] = {r, sender, mid};
  }
  // To a rank already down: no reply will come, and peer_down's sweep of
  // the open requests has passed (checked after registering, so a rank
  // going down right now is caught by one or the other).
  if (is_down(r)) {
    pending_request p;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto taken = pending_.extract(id);
      if (taken.empty())
        return; // the sweep answered it
      p = taken.mapped();
    }
    answer(p, caf::make_message(caf::make_error(caf::sec::runtime_error, "rank " + std::to_string(r) + " is gone")));
    return;
  }
  auto f = encode(msg, ctx_, slot, ref_of(sender), [this](const caf::actor& a) { return ref_of(a); }, id);
  link_->send(r, std::move(f.header), std::move(f.data), may_reference(msg));
}

void node::send_reply(int r, std::uint64_t id, const caf::message& reply) {
  try {
    if (reply.size() == 1 && reply.match_element<caf::error>(0)) {
      auto text = caf::make_message(sys_.render(reply.get_as<caf::error>(0)));
      auto f = encode(text, ctx_, 0, {}, [](const caf::actor&) { return actor_ref{}; }, id, frame_kind::error_reply);
      link_->send(r, std::move(f.header), std::move(f.data));
      return;
    }
    auto f = encode(reply, ctx_, 0, {}, [this](const caf::actor& a) { return ref_of(a); }, id, frame_kind::reply);
    link_->send(r, std::move(f.header), std::move(f.data), true); // a snapshot: see may_reference
  } catch (const std::exception& e) {
    auto text = caf::make_message(std::string("the reply could not be sent: ") + e.what());
    auto f = encode(text, ctx_, 0, {}, [](const caf::actor&) { return actor_ref{}; }, id, frame_kind::error_reply);
    link_->send(r, std::move(f.header), std::move(f.data));
  }
}

void node::answer(const pending_request& p, caf::message content) {
  if (p.sender)
    p.sender->enqueue(caf::make_mailbox_element(nullptr, p.mid.response_id(), {}, std::move(content)), nullptr);
}

void node::on_frame(const void* header, std::size_t bytes, kernels::tensor data) {
  try {
    std::shared_ptr<peer_budget::ticket> ticket;
    data = budget_.track(data, ticket);
    auto f = decode(header, bytes, data, ctx_, -1, [this](actor_ref r) { return resolve(r); });
    if (f.src < 0 || f.src >= size() || f.src == rank())
      throw frame_error("frame claims to come from rank " + std::to_string(f.src));
    if (f.dst == slots::fence && rejoin_.on_control(f.src, f.msg))
      return; // a knock or a readmission: heard even from (and by) a rank cut off
    if (is_cut_off(f.src)) // nothing it sends is acted on (a failed peer's last frames still are)
      return;
    watch_.heard(f.src);
    if (ticket) { // counted from here on, given back when the last view of the data goes
      const auto now = budget_.charge(*ticket, f.src, static_cast<std::int64_t>(data.bytes()));
      if (now > static_cast<std::int64_t>(budget_.limit())) {
        cut_off(f.src, "its frames hold " + std::to_string(now >> 10) + " KiB here that no actor has handled yet, over "
                         "the budget of " + std::to_string(budget_.limit() >> 10) + " KiB per peer");
        return;
      }
    }
    if (f.kind != frame_kind::message)
      on_reply(f);
    else if (f.dst == slots::fence)
      on_fence(f);
    else if (f.dst != slots::heartbeat)
      deliver(f);
  } catch (const std::exception& e) {
    reject(e.what());
  }
}

void node::on_reply(decoded_frame& f) {
  pending_request p;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pending_.find(f.request_id);
    if (it == pending_.end() || it->second.rank != f.src)
      throw frame_error("reply from rank " + std::to_string(f.src) + " to unknown request " +
                        std::to_string(f.request_id));
    p = it->second;
    pending_.erase(it);
  }
  if (f.kind == frame_kind::error_reply) {
    const std::string text = f.msg.size() == 1 && f.msg.match_element<std::string>(0)
                               ? f.msg.get_as<std::string>(0) : std::string("(no text)");
    answer(p, caf::make_message(caf::make_error(caf::sec::runtime_error, "rank " + std::to_string(f.src) + ": " + text)));
  } else
    answer(p, std::move(f.msg));
}

void node::on_fence(const decoded_frame& f) {
  const std::string why = f.msg.size() == 1 && f.msg.match_element<std::string>(0)
                            ? f.msg.get_as<std::string>(0) : std::string("it cut this rank off");
  cut_[static_cast<std::size_t>(f.src)].store(true, std::memory_order_release);
  peer_down(f.src, why);
}

void node::deliver(decoded_frame& f) {
  caf::actor dst;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = published_.find(f.dst);
    if (it == published_.end())
      throw frame_error("frame from rank " + std::to_string(f.src) + " for slot " + std::to_string(f.dst) +
                        ", nothing published there");
    dst = it->second;
  }
  auto* unit = static_cast<inline_unit*>(unit_.get());
  if (f.request_id == 0) {
    auto sender = f.sender.rank >= 0 ? resolve(f.sender) : caf::actor{};
    dst->enqueue(caf::make_mailbox_element(caf::actor_cast<caf::strong_actor_ptr>(sender), caf::make_message_id(),
                                           {}, std::move(f.msg)),
                 unit);
    unit->run();
    return;
  }
  // A request: the reply goes back through this rank's catcher.
  caf::actor catcher;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto& c = catchers_[f.src];
    if (!c) {
      caf::actor_config cfg;
      c = caf::make_actor<reply_catcher, caf::actor>(sys_.next_actor_id(), sys_.node(), &sys_, cfg,
                                                    weak_from_this(), f.src);
    }
    catcher = c;
  }
  check(f.request_id <= caf::message_id::request_id_mask, "request id out of range");
  dst->enqueue(caf::make_mailbox_element(caf::actor_cast<caf::strong_actor_ptr>(catcher),
                                         caf::make_message_id(f.request_id), {}, std::move(f.msg)),
               unit);
  unit->run();
}

void node::close(int timeout_ms) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_)
      return;
    closed_ = true;
  }
  watch_.stop();
  link_->close(timeout_ms);
  std::lock_guard<std::mutex> lk(mu_);
  proxies_.clear();
  proxy_ref_.clear();
  catchers_.clear();
  published_.clear();
  slot_of_.clear();
}

} // namespace gradwire::transport
