#include "transport/inproc_link.hpp"

#include "kernels/error.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace gradwire::transport {

struct inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::vector<std::uint8_t>, kernels::tensor>> frames;
  link::handlers h;
  std::thread thread;
  bool stop = false, started = false;
  std::vector<bool> dead;
};

class inproc_hub {
public:
  explicit inproc_hub(int n) : boxes(static_cast<std::size_t>(n)) {
    for (auto& b : boxes) {
      b = std::make_unique<inbox>();
      b->dead.assign(static_cast<std::size_t>(n), false);
    }
  }
  std::vector<std::unique_ptr<inbox>> boxes;
  std::shared_ptr<buffer_pool> pool = std::make_shared<buffer_pool>();
};

std::vector<std::unique_ptr<inproc_link>> inproc_link::make_group(int n) {
  auto hub = std::make_shared<inproc_hub>(n);
  std::vector<std::unique_ptr<inproc_link>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<inproc_link>(hub, r, n));
  return out;
}

inproc_link::inproc_link(std::shared_ptr<inproc_hub> hub, int rank, int size)
    : hub_(std::move(hub)), rank_(rank), size_(size) {}

inproc_link::~inproc_link() { close(1000); }

void inproc_link::start(handlers h) {
  auto& b = *hub_->boxes[static_cast<std::size_t>(rank_)];
  b.h = std::move(h);
  b.started = true;
  b.thread = std::thread([&b] {
    std::unique_lock<std::mutex> lk(b.mu);
    while (true) {
      b.cv.wait(lk, [&] { return b.stop || !b.frames.empty(); });
      if (b.frames.empty())
        return;
      auto f = std::move(b.frames.front());
      b.frames.pop_front();
      lk.unlock();
      if (b.h.receive)
        b.h.receive(f.first.data(), f.first.size(), std::move(f.second));
      lk.lock();
    }
  });
}

void inproc_link::inject(const void* header, std::size_t header_bytes, kernels::tensor data) {
  auto& b = *hub_->boxes[static_cast<std::size_t>(rank_)];
  std::vector<std::uint8_t> bytes(header_bytes);
  if (header_bytes)
    std::memcpy(bytes.data(), header, header_bytes);
  std::lock_guard<std::mutex> lk(b.mu);
  b.frames.emplace_back(std::move(bytes), std::move(data));
  b.cv.notify_one();
}

void inproc_link::send(int peer, std::vector<std::uint64_t> header, kernels::tensor data, bool) {
  check(peer >= 0 && peer < size_ && peer != rank_, "send to rank " + std::to_string(peer) + ": no such peer");
  auto& me = *hub_->boxes[static_cast<std::size_t>(rank_)];
  {
    std::lock_guard<std::mutex> lk(me.mu);
    if (me.dead[static_cast<std::size_t>(peer)])
      return; // reported once by kill_peer; later sends are dropped
  }
  kernels::tensor copy; // what a wire does: the receiver gets its own bytes
  if (data.defined()) {
    copy = hub_->pool->get(static_cast<std::size_t>(data.numel()));
    std::memcpy(copy.data(), data.data(), data.bytes());
  }
  auto& b = *hub_->boxes[static_cast<std::size_t>(peer)];
  std::vector<std::uint8_t> bytes(header.size() * sizeof(std::uint64_t));
  std::memcpy(bytes.data(), header.data(), bytes.size());
  std::lock_guard<std::mutex> lk(b.mu);
  b.frames.emplace_back(std::move(bytes), std::move(copy));
  b.cv.notify_one();
}

void inproc_link::kill_peer(int peer) {
  auto& me = *hub_->boxes[static_cast<std::size_t>(rank_)];
  {
    std::lock_guard<std::mutex> lk(me.mu);
    me.dead[static_cast<std::size_t>(peer)] = true;
  }
  if (me.h.peer_error)
    me.h.peer_error(peer, "connection to rank " + std::to_string(peer) + " failed: killed by the test");
}

void inproc_link::close(int) {
  auto& b = *hub_->boxes[static_cast<std::size_t>(rank_)];
  {
    std::lock_guard<std::mutex> lk(b.mu);
    b.stop = true;
    b.cv.notify_one();
  }
  if (b.thread.joinable())
    b.thread.join();
}

} // namespace gradwire::transport
