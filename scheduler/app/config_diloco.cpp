#include "scheduler/app/config_diloco.hpp"

#include "kernels/error.hpp"
#include "models/model.hpp"

#include <string>

namespace gradwire::scheduler {

using config_toml::reader;

void read_async_outer(reader& r, run_config& c) {
  auto& ps = c.ps;
  const auto only_async = [&](const char* key, const std::string& what) {
    return r.loc(key) + what + " async DiLoCo's (topology.kind = \"diloco\", mode \"async\"), not " +
           c.topology + " " + c.mode;
  };
  ps.outer_delay = static_cast<int>(r.integer("topology.diloco.outer_delay"));
  check(ps.outer_delay <= 1 || ps.outer_async(),
        only_async("topology.diloco.outer_delay", " = " + std::to_string(ps.outer_delay) + ": delayed Nesterov is"));
  ps.dynamic_local_steps = r.boolean("topology.diloco.dynamic_local_steps");
  check(!ps.dynamic_local_steps || ps.outer_async(), only_async("topology.diloco.dynamic_local_steps", ": dynamic local steps are"));
  check(!ps.dynamic_local_steps || (c.checkpoint_every == 0 && c.checkpoint_every_s == 0),
        r.loc("topology.diloco.dynamic_local_steps") +
          ": dynamic local steps do not checkpoint (each worker's rounds end where its speed puts them); set "
          "train.checkpoint_every and checkpoint_every_s to 0");
}

void check_fragments(reader& r, const run_config& c) {
  if (c.ps.fragments <= 1)
    return;
  const auto tensors = models::layout_of(c.model).offsets.size();
  check(static_cast<std::size_t>(c.ps.fragments) <= tensors,
        r.loc("topology.streaming.fragments") + " = " + std::to_string(c.ps.fragments) + ": a fragment holds whole tensors, " +
          "and the model has " + std::to_string(tensors));
}

void read_streaming(reader& r, run_config& c) {
  auto& ps = c.ps;
  ps.fragments = static_cast<int>(r.integer("topology.streaming.fragments"));
  ps.sync_delay = static_cast<int>(r.integer("topology.streaming.sync_delay"));
  ps.merge_alpha = static_cast<float>(r.number("topology.streaming.merge_alpha"));
  check(ps.sync_delay == 0 || ps.fragments >= 1,
        r.loc("topology.streaming.sync_delay") + " = " + std::to_string(ps.sync_delay) + " overlaps a streaming exchange: set " +
          "topology.streaming.fragments (1: the whole model at once)");
  if (ps.fragments == 0)
    return;
  check(ps.local_sgd() && c.mode == "sync",
        r.loc("topology.streaming.fragments") +
          ": streaming exchanges fragments of local SGD or DiLoCo in lock step (topology.kind = \"local-sgd\" or "
          "\"diloco\", mode \"sync\"), not " + c.topology + " " + c.mode);
  check(ps.fragments <= ps.local_steps,
        r.loc("topology.streaming.fragments") + " = " + std::to_string(ps.fragments) + ": each fragment is exchanged once every " +
          "topology.local_steps = " + std::to_string(ps.local_steps) + " steps, at most one a step");
  check(ps.sync_delay < ps.local_steps / ps.fragments,
        r.loc("topology.streaming.sync_delay") + " = " + std::to_string(ps.sync_delay) + ": a fragment's exchange must land " +
          "before the next fragment's is sent, within local_steps / fragments = " +
          std::to_string(ps.local_steps / ps.fragments) + " steps");
  check(c.checkpoint_every == 0 && c.checkpoint_every_s == 0,
        r.loc("topology.streaming.fragments") +
          ": streaming does not checkpoint (each fragment is at its own point of the round); set "
          "train.checkpoint_every and checkpoint_every_s to 0");
  ps.shards = ps.fragments * ps.shards; // topology.ps.shards: the shards each fragment is spread over
}

} // namespace gradwire::scheduler
