#include "scheduler/app/config_transport.hpp"

#include "kernels/error.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

namespace gradwire::scheduler {

using config_toml::reader;

namespace {

/// [compression]: checked against the topology it compresses.
void read_compression(reader& r, run_config& c) {
  auto& z = c.compress;
  z.mode = *models::compress_mode_of(r.str("compression.kind")); // the schema allows only the modes
  z.ratio = r.number("compression.ratio");
  z.rank = static_cast<int>(r.integer("compression.rank"));
  z.error_feedback = r.boolean("compression.error_feedback");
  z.warmup = r.integer("compression.warmup");
  z.momentum = r.boolean("compression.momentum");
  check(!z.momentum || (z.warmup > 0 && c.opt.kind != "sgd" && z.mode != models::compress_mode::powersgd &&
                        z.mode != models::compress_mode::none),
        r.loc("compression.momentum") + ": 1-bit Adam compresses Adam's momentum after a dense warm-up: it " +
          "needs train.optimizer = \"adam\" or \"adamw\", compression.warmup > 0 and a one-round mode " +
          "(bf16, topk, randk, sign, int8)");
  z.update = r.boolean("compression.update");
  check(!z.update || (z.mode != models::compress_mode::none && z.warmup == 0 && !z.momentum),
        r.loc("compression.update") + ": compressing each worker's own optimizer step needs compression.kind, "
          "and takes no compression.warmup or compression.momentum (those share one optimizer state)");
  check(z.ratio > 0, r.loc("compression.ratio") + " = 0 sends nothing: give a fraction in (0, 1]");
  check(z.warmup == 0 || z.mode != models::compress_mode::none,
        r.loc("compression.warmup") + " = " + std::to_string(z.warmup) +
          ": a warm-up before compression needs compression.kind");
  if (z.mode == models::compress_mode::none)
    return;
  const std::string mode = std::string("compression.kind = \"") + models::compress_name(z.mode) + "\"";
  const bool ring = c.family == &ring_family;
  const bool pushes = c.family && c.family->has_shards;
  const bool gossip = c.family == &gossip_family;
  check(ring || pushes || gossip,
        r.loc("compression.kind") + ": " + mode + " compresses a ring's gradients, the pushes to parameter-server "
          "shards or gossip's parameters; topology.kind = \"" + c.topology +
          "\" exchanges dense fp32 (docs/compression.md says where each mode applies)");
  check(ring || z.warmup == 0,
        r.loc("compression.warmup") + ": the dense warm-up is a ring's (its workers sum dense gradients " +
          "round a ring first); topology.kind = \"" + c.topology + "\" compresses from the first step");
  check(ring || !z.update, r.loc("compression.update") + ": each worker's own step goes round a ring; " +
                            "topology.kind = \"" + c.topology + "\" compresses what it exchanges as it is");
  check(ring || z.mode != models::compress_mode::powersgd,
        r.loc("compression.kind") + ": " + mode + " needs the workers' factors summed, which a ring does; " +
          "topology.kind = \"" + c.topology + "\" takes bf16, topk, randk, sign or int8");
  check(!gossip || c.gossip.mode == actors::gossip_mode::dpsgd,
        r.loc("compression.kind") + ": " + mode + " with topology.gossip.mode = \"adpsgd\": compressed gossip " +
          "(CHOCO-SGD) keeps estimates of fixed neighbours in lock step; use topology.gossip.mode = \"dpsgd\"");
  check(!gossip || (c.gossip.graph != "exponential" && c.gossip.graph_seed == 0),
        r.loc("compression.kind") + ": " + mode + " with a graph that changes every step (topology.gossip.graph = " +
          "\"exponential\" or topology.gossip.graph_seed): compressed gossip " +
          "keeps an estimate of each neighbour, so it needs a fixed graph (ring, torus, random or complete)");
  check(c.ring.balance_every == 0, r.loc("compression.kind") + ": " + mode +
                                     " with topology.ring.balance_every > 0: a compressed ring does not balance batches");
}

/// transport.wire_dtype on the parameter-server families: the pushes
/// (gradients, or local SGD's and DiLoCo's pseudo-gradients) rounded to
/// bf16 or int8 without error feedback, through the compressed pushes.
void wire_dtype_pushes(const std::string& at, const std::string& w, run_config& c) {
  check(c.compress.mode == models::compress_mode::none,
        at + "compression.kind sets the pushes' payload too: choose one of the two");
  c.compress.mode = w == "bf16" ? models::compress_mode::bf16 : models::compress_mode::int8;
  c.compress.error_feedback = false;
}

/// transport.wire_dtype: bf16 chunks on a flat ring of the workers' own,
/// or low-precision pushes to shards.
void read_wire_dtype(reader& r, run_config& c) {
  const auto w = r.str("transport.wire_dtype");
  if (w == "fp32")
    return;
  const auto at = r.loc("transport.wire_dtype") + " = \"" + w + "\": ";
  if (c.family && c.family->has_shards) {
    wire_dtype_pushes(at, w, c);
    return;
  }
  check(c.family == &ring_family,
        at + "low precision on the wire is a ring's chunks or the pushes to shards; topology.kind = \"" + c.topology +
          "\" takes compression.kind = \"" + w + "\" for its payloads, with error feedback");
  check(w == "bf16", at + "a ring's chunks cross as bf16 or fp32 (int8 is for pushes to shards, or compression.kind)");
  check(c.compress.mode == models::compress_mode::none,
        at + "a compressed ring (compression.kind) sends payloads of its own, not chunks: choose one of the two");
  check(!c.ring.overlap, at + "bf16 chunks run on the workers' own ring, not the peers that overlap with backward: " +
                           "set topology.ring.overlap = false");
  c.ring.wire_bf16 = true;
  c.ring.sharded_update = false; // it passes fp32 parameters round the ring
}

} // namespace

void read_transport(reader& r, run_config& c) {
  read_compression(r, c);
  read_wire_dtype(r, c);
  c.transport_tls = r.str("transport.tls");
  c.spin_us = static_cast<int>(r.integer("transport.spin_us"));
  c.progress_nice = static_cast<int>(r.integer("transport.progress_nice"));
  c.shm_refs = r.boolean("transport.shm_refs");
  c.peer_timeout_ms = static_cast<int>(r.integer("transport.peer_timeout_ms"));
  c.rejoin_s = r.number("transport.rejoin_s");
  c.latency_us = r.number("transport.latency_us");
  c.bandwidth_gbps = r.number("transport.bandwidth_gbps");
}

} // namespace gradwire::scheduler
