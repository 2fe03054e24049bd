#include "transport/emulated_link.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <queue>
#include <thread>

namespace gradwire::transport {
namespace {

using clock_type = std::chrono::steady_clock;

class emulated_link final : public link {
public:
  emulated_link(std::unique_ptr<link> inner, link_shape shape)
      : inner_(std::move(inner)), shape_(std::move(shape)),
        busy_until_(static_cast<std::size_t>(inner_->size()), clock_type::now()),
        last_due_(static_cast<std::size_t>(inner_->size()), clock_type::now()),
        queued_(static_cast<std::size_t>(inner_->size()), 0) {
    check(shape_.latency_us >= 0 && shape_.bandwidth_gbps >= 0, "link emulation: latency and bandwidth must be >= 0");
  }
  ~emulated_link() override { close(1000); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  void start(handlers h) override {
    inner_->start(std::move(h));
    timer_ = std::thread([this] { run(); });
  }

  void send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool may_reference = false) override {
    check(peer >= 0 && peer < size(), "send to rank " + std::to_string(peer) + ": no such peer");
    const auto p = static_cast<std::size_t>(peer);
    std::unique_lock<std::mutex> lk(mu_);
    const auto now = clock_type::now();
    if (!shape_.shaped() && queued_[p] == 0 && (!shape_.faults || shape_.faults->quiet(peer, now))) {
      lk.unlock(); // nothing to emulate on this link now: the inner link's own path
      inner_->send(peer, std::move(header), std::move(data), may_reference);
      return;
    }
    // An emulated network copies.
    const double bytes = static_cast<double>(header.size() * 8 + (data.defined() ? data.bytes() : 0));
    const auto wire = shape_.bandwidth_gbps > 0 ? std::chrono::duration<double>(bytes * 8 / (shape_.bandwidth_gbps * 1e9))
                                                : std::chrono::duration<double>(0);
    auto& busy = busy_until_[p];
    const auto depart = std::max(now, busy) + std::chrono::duration_cast<clock_type::duration>(wire);
    busy = depart;
    auto due = depart + std::chrono::duration_cast<clock_type::duration>(
                          std::chrono::duration<double, std::micro>(shape_.latency_us));
    if (shape_.faults)
      due = shape_.faults->hold(peer, now, due);
    due = std::max(due, last_due_[p]); // frames to one peer stay in order
    last_due_[p] = due;
    ++queued_[p];
    queue_.push(frame{due, seq_++, peer, std::move(header), std::move(data)});
    cv_.notify_one();
  }

  void close(int timeout_ms) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (closed_)
        return;
      closed_ = true;
      flush_until_ = clock_type::now() + std::chrono::milliseconds(timeout_ms);
      cv_.notify_one();
    }
    if (timer_.joinable())
      timer_.join();
    inner_->close(timeout_ms);
  }

  bool poll() override { return inner_->poll(); } // receiving is the inner link's

  void reconnect(int peer, const std::vector<std::uint8_t>& address) override {
    forget(peer); // what was held for the old process
    inner_->reconnect(peer, address);
  }

  void forget(int peer) override {
    std::lock_guard<std::mutex> lk(mu_);
    std::priority_queue<frame> keep;
    while (!queue_.empty()) {
      auto f = std::move(const_cast<frame&>(queue_.top()));
      queue_.pop();
      if (f.peer == peer)
        --queued_[static_cast<std::size_t>(peer)];
      else
        keep.push(std::move(f));
    }
    queue_.swap(keep);
    inner_->forget(peer);
  }

  std::string describe() const override {
    if (!shape_.shaped())
      return inner_->describe() + " (link faults injected)";
    char b[96];
    std::snprintf(b, sizeof b, " (emulated: %.0f us, %s)", shape_.latency_us,
                  shape_.bandwidth_gbps > 0 ? (std::to_string(shape_.bandwidth_gbps) + " Gb/s").c_str() : "unlimited");
    return inner_->describe() + b;
  }

private:
  struct frame {
    clock_type::time_point due;
    std::uint64_t seq;
    int peer;
    std::vector<std::uint64_t> header;
    kernels::tensor data;
    bool operator<(const frame& o) const { return due != o.due ? due > o.due : seq > o.seq; } // min-heap
  };

  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      if (queue_.empty()) {
        if (closed_)
          return;
        cv_.wait(lk);
        continue;
      }
      const auto due = queue_.top().due;
      if (closed_ && clock_type::now() > flush_until_)
        return; // frames still held are dropped at close, as a cut cable would
      if (clock_type::now() < due) {
        cv_.wait_until(lk, due);
        continue;
      }
      auto f = std::move(const_cast<frame&>(queue_.top()));
      queue_.pop();
      lk.unlock();
      try {
        inner_->send(f.peer, std::move(f.header), std::move(f.data));
      } catch (const std::exception& e) {
        log::warn("link emulation: {}", e.what());
      }
      lk.lock();
      --queued_[static_cast<std::size_t>(f.peer)]; // sent: a later frame may take the direct path
    }
  }

  std::unique_ptr<link> inner_;
  link_shape shape_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<frame> queue_;
  std::vector<clock_type::time_point> busy_until_;
  std::vector<clock_type::time_point> last_due_; ///< per peer: when its last queued frame is due
  std::vector<int> queued_;                      ///< per peer: frames queued, not yet sent
  std::uint64_t seq_ = 0;
  bool closed_ = false;
  clock_type::time_point flush_until_;
  std::thread timer_;
};

} // namespace

std::unique_ptr<link> emulate(std::unique_ptr<link> inner, link_shape shape) {
  if (!shape.active())
    return inner;
  return std::make_unique<emulated_link>(std::move(inner), shape);
}

} // namespace gradwire::transport
