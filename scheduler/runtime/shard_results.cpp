#include "scheduler/runtime/shard_results.hpp"

#include <algorithm>
#include <cstring>

namespace gradwire::scheduler {

namespace {

/// Virtual time, after the loop stopped: this thread runs the shards.
void pump(const topology_setup& setup) {
  if (setup.sim)
    setup.sim->drain();
}

} // namespace

std::string fetch_params(caf::actor_system& sys, caf::scoped_actor& self, const topology_setup& setup,
                         const std::vector<actors::shard_actor>& shards, const shard_ranges_t& ranges,
                         std::size_t size, std::vector<float>& params, const std::string& tier) {
  params.assign(size, 0.f);
  std::string failure;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    auto fetched = self->request(shards[i], setup.timeout, actors::fetch_atom::value);
    pump(setup);
    std::move(fetched).receive(
      [&](std::int64_t, actors::slice p) {
        const auto n = std::min(static_cast<std::size_t>(p.numel()), size - std::min(size, ranges[i].first));
        std::memcpy(params.data() + ranges[i].first, p.data(), n * sizeof(float));
      },
      [&](caf::error& e) { failure = tier + " " + std::to_string(i) + ": " + sys.render(e); });
  }
  return failure;
}

std::string add_shard_stats(caf::actor_system& sys, caf::scoped_actor& self, const topology_setup& setup,
                            const std::vector<actors::shard_actor>& shards, topology_outcome& out,
                            const std::string& tier) {
  if (out.dropped.empty())
    out.dropped.assign(static_cast<std::size_t>(setup.workers), 0);
  std::string failure;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    auto stats = self->request(shards[i], setup.timeout, actors::stats_atom::value);
    pump(setup);
    std::move(stats).receive(
      [&](std::int64_t, actors::histogram h, std::int64_t gap, std::vector<std::int64_t> dropped) {
        out.max_clock_gap = std::max(out.max_clock_gap, gap);
        if (out.staleness.size() < h.size())
          out.staleness.resize(h.size(), 0);
        for (std::size_t k = 0; k < h.size(); ++k)
          out.staleness[k] += h[k];
        for (std::size_t r = 0; r < dropped.size() && r < out.dropped.size(); ++r)
          out.dropped[r] += dropped[r];
      },
      [&](caf::error& e) { failure = tier + " " + std::to_string(i) + ": " + sys.render(e); });
  }
  return failure;
}

} // namespace gradwire::scheduler
