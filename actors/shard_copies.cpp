#include "actors/shard_copies.hpp"

#include <algorithm>

namespace gradwire::actors {

void shard_copies::after_version(std::int64_t version, const take_fn& take) {
  if (every_ > 0 && version % every_ == 0) {
    kept_.push_back(take());
    if (kept_.size() > 2)
      kept_.erase(kept_.begin());
  }
  const auto p = std::find(pins_.begin(), pins_.end(), version);
  if (p != pins_.end()) {
    pins_.erase(p);
    pinned_.push_back(take());
    bound();
  }
  std::vector<std::pair<std::int64_t, caf::response_promise>> still;
  for (auto& [v, rp] : waiting_) {
    if (v > version) {
      still.emplace_back(v, std::move(rp));
      continue;
    }
    if (const auto* k = find(v)) {
      auto [m, f] = as_reply(*k);
      rp.deliver(m, f);
      taken(v);
    } else {
      rp.deliver(caf::make_error(caf::sec::invalid_argument, missing(v, version)));
    }
  }
  waiting_ = std::move(still);
}

void shard_copies::pin(std::int64_t version, std::int64_t now, const take_fn& take) {
  if (version > now)
    pins_.push_back(version);
  else if (const auto* k = find(version))
    pinned_.push_back(*k);
  else if (version == now)
    pinned_.push_back(take());
  bound();
}

const snapshot* shard_copies::find(std::int64_t version) const {
  for (const auto& k : pinned_)
    if (k.step == version)
      return &k;
  for (const auto& k : kept_)
    if (k.step == version)
      return &k;
  return nullptr;
}

void shard_copies::taken(std::int64_t version) {
  pinned_.erase(std::remove_if(pinned_.begin(), pinned_.end(), [&](const snapshot& k) { return k.step == version; }),
                pinned_.end());
}

bool shard_copies::will_keep(std::int64_t version, std::int64_t now) const {
  return version > now && ((every_ > 0 && version % every_ == 0) ||
                           std::find(pins_.begin(), pins_.end(), version) != pins_.end());
}

shard_copies::reply shard_copies::as_reply(const snapshot& s) {
  auto f = s.packed();
  return {s.meta(), f.empty() ? slice{} : slice::from(f, {static_cast<std::int64_t>(f.size())})};
}

std::string shard_copies::missing(std::int64_t version, std::int64_t now) const {
  return who_ + ": no snapshot of version " + std::to_string(version) + " (at version " + std::to_string(now) + ")";
}

void shard_copies::bound() {
  if (pins_.size() > max_pins)
    pins_.erase(pins_.begin(), pins_.end() - static_cast<std::ptrdiff_t>(max_pins));
  if (pinned_.size() > max_pins)
    pinned_.erase(pinned_.begin(), pinned_.end() - static_cast<std::ptrdiff_t>(max_pins));
}

} // namespace gradwire::actors
