#include "transport/emulated_link.hpp"

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
      : inner_(std::move(inner)), shape_(shape), busy_until_(static_cast<std::size_t>(inner_->size()), clock_type::now()) {
    check(shape.latency_us >= 0 && shape.bandwidth_gbps >= 0, "link emulation: latency and bandwidth must be >= 0");
  }
  ~emulated_link() override { close(1000); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  void start(handlers h) override {
    inner_->start(std::move(h));
    timer_ = std::thread([this] { run(); });
  }

  void send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool = false) override { // an emulated network copies
    check(peer >= 0 && peer < size(), "send to rank " + std::to_string(peer) + ": no such peer");
    const double bytes = static_cast<double>(header.size() * 8 + (data.defined() ? data.bytes() : 0));
    const auto wire = shape_.bandwidth_gbps > 0 ? std::chrono::duration<double>(bytes * 8 / (shape_.bandwidth_gbps * 1e9))
                                                : std::chrono::duration<double>(0);
    std::lock_guard<std::mutex> lk(mu_);
    auto& busy = busy_until_[static_cast<std::size_t>(peer)];
    const auto depart = std::max(clock_type::now(), busy) + std::chrono::duration_cast<clock_type::duration>(wire);
    busy = depart;
    const auto due = depart + std::chrono::duration_cast<clock_type::duration>(
                                std::chrono::duration<double, std::micro>(shape_.latency_us));
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

  std::string describe() const override {
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
        std::fprintf(stderr, "gradwire: link emulation: %s\n", e.what());
      }
      lk.lock();
    }
  }

  std::unique_ptr<link> inner_;
  link_shape shape_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<frame> queue_;
  std::vector<clock_type::time_point> busy_until_;
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
