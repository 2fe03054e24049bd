#include "kernels/stop_request.hpp"

namespace gradwire::kernels {
namespace {

std::atomic<const std::atomic<bool>*> g_flag{nullptr};

} // namespace

void set_stop_request(const std::atomic<bool>* flag) { g_flag.store(flag, std::memory_order_release); }

bool stop_requested() {
  const auto* f = g_flag.load(std::memory_order_acquire);
  return f != nullptr && f->load(std::memory_order_relaxed);
}

} // namespace gradwire::kernels
