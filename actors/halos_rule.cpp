/// @file halos_rule.cpp
/// HALoS's local server's rule (halos_rule.hpp).
#include "actors/halos_rule.hpp"
#include "actors/ps_shard_state.hpp"
#include "actors/refuse.hpp"

#include "kernels/host_vector.hpp"
#include "kernels/log.hpp"

#include <cstring>
#include <string>

namespace gradwire::actors {
namespace {

using shard_detail::shard_self;
using shard_detail::shard_state;

class halos_local_rule final : public shard_detail::server_rule {
public:
  halos_local_rule(const halos_options& o, halos_link up, std::size_t n, const slice& initial)
      : o_(o), up_(std::move(up)), base_(slice::empty({static_cast<std::int64_t>(n)})),
        sent_(slice::empty({static_cast<std::int64_t>(n)})) {
    std::memcpy(base_.data(), initial.data(), n * sizeof(float));
  }
  const char* name() const override { return "HALoS local"; }
  bool rounds() const override { return false; }
  models::optimizer_spec optimizer(const shard_config& /*cfg*/) const override {
    return shard_detail::outer_optimizer(o_.local_lr, o_.local_momentum);
  }
  void start(shard_self self) override { self_ = self; }
  void apply_push(shard_state& st, int /*rank*/, std::int64_t /*staleness*/, const float* g, float lr_scale) override {
    shard_detail::apply(st, g, lr_scale);
    ++since_;
    if (since_ >= o_.exchange_every && !in_flight_)
      exchange(st);
  }

private:
  /// Sends the progress since the last merge, base - local (a
  /// pseudo-gradient, as a worker's), to the global shard.
  void exchange(shard_state& st) {
    const std::size_t n = shard_detail::len(st);
    auto delta = slice::empty({static_cast<std::int64_t>(n)});
    const float* w = st.params.data();
    const float* b = base_.data();
    kernels::subtract(n, b, w, delta.data());
    std::memcpy(sent_.data(), w, n * sizeof(float));
    since_ = 0;
    in_flight_ = true;
    const auto exchange_no = exchanges_++;
    self_->request(up_.global, up_.timeout, push_pull_atom::value, up_.group, global_version_, exchange_no,
                   std::int64_t{0}, std::move(delta))
      .then([this](std::int64_t /*staleness*/, std::int64_t version, slice global) { merge(version, global); },
            [this](caf::error& e) { fail("its exchange with the global server failed: " + error_text(self_->system(), e)); });
  }

  /// The global server's answer: merged, and the next exchange sent if due.
  void merge(std::int64_t version, const slice& global) {
    auto& st = self_->state;
    const std::size_t n = shard_detail::len(st);
    if (static_cast<std::size_t>(global.numel()) != n)
      return fail("the global server answered " + std::to_string(global.numel()) + " floats for a slice of " +
                  std::to_string(n));
    kernels::merge_answer(n, o_.merge_alpha, global.data(), sent_.data(), st.params.data(), base_.data());
    global_version_ = version;
    in_flight_ = false;
    shard_detail::applied(st); // a merge is an update: the local version moves on
    if (since_ >= o_.exchange_every)
      exchange(st);
  }

  void fail(const std::string& why) {
    const auto text = "HALoS local server of group " + std::to_string(up_.group) + ", shard " +
                      std::to_string(self_->state.cfg.id) + ": " + why;
    log::error("{}", text);
    self_->quit(caf::make_error(caf::sec::runtime_error, text));
  }

  halos_options o_;
  halos_link up_;
  shard_self self_ = nullptr;
  slice base_;                     ///< the merged send point: progress is counted from here
  slice sent_;                     ///< the local parameters when the exchange in flight was sent
  int since_ = 0;                  ///< workers' pushes applied since the last send
  bool in_flight_ = false;
  std::int64_t exchanges_ = 0;      ///< sent so far (the global shard's clock for this group)
  std::int64_t global_version_ = 0; ///< the global version of the last answer
};

} // namespace

std::unique_ptr<shard_detail::server_rule> make_halos_rule(const halos_options& o, halos_link up, std::size_t len,
                                                           const slice& initial) {
  return std::make_unique<halos_local_rule>(o, std::move(up), len, initial);
}

} // namespace gradwire::actors
