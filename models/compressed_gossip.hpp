#pragma once
/// @file compressed_gossip.hpp
/// D-PSGD whose parameters travel compressed (compression.kind on
/// topology.kind = "gossip").
///
/// CHOCO-SGD (Koloskova et al. 2019): every worker keeps an estimate x^_j
/// of each neighbour's parameters and of its own, the same estimates on
/// both sides of an edge. After its local step, worker i sends
/// q_i = Q(x_i - x^_i); every holder of x^_i adds q_i to it; then
///   x_i <- x_i + gamma * sum_j w_ij (x^_j - x^_i).
/// The compression error stays in x_i - x^_i and is sent later, so it
/// converges under any compression. With nothing dropped and gamma = 1 it
/// is D-PSGD, to rounding.
///
/// Naive compressed gossip mixes compressed parameters instead:
///   x_i <- x_i + gamma * sum_j w_ij (Q(x_j) - Q(x_i)),
/// which keeps no memory of what compression dropped; it is here to show
/// what CHOCO's estimates buy.
///
/// Payloads are models/compress.hpp's one-round modes (bf16, topk, randk,
/// sign), without error feedback: CHOCO's estimates take its place.

#include "models/compress.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace gradwire::models {

enum class gossip_rule { choco, naive };

/// The consensus step gamma when none is given: CHOCO's consensus
/// converges for gamma up to about the fraction of the change a payload
/// carries (Koloskova et al. 2019), so twice the kept ratio for top-k and
/// random-k, a half for sign, 1 for bf16 and int8; larger steps stall or
/// diverge (docs/compression.md measures it).
float consensus_step(const compress_spec& spec);

class compressed_gossip {
public:
  /// `neighbours`: the ranks this worker mixes with (a fixed graph);
  /// gamma 0: consensus_step(spec).
  compressed_gossip(compress_spec spec, gossip_rule rule, float gamma, std::size_t n, const std::vector<int>& neighbours);

  /// What to send after the local step, from the parameters x (CHOCO:
  /// Q(x - x^_i), and x^_i moves by it; naive: Q(x)).
  std::vector<std::uint32_t> payload(const float* x, std::int64_t step, int rank);
  /// Throws gradwire::error when a neighbour's payload is malformed.
  void check(const std::uint32_t* words, std::size_t count) const { codec_.check(words, count); }
  /// The last payload's compression error (of what it compressed: the
  /// model, or CHOCO's difference from its own estimate).
  compress_energy last_energy() const { return codec_.last_energy(); }
  /// The mix, once every neighbour's payload of the step is in: `from[k]`
  /// sent `got[k]` (graph order), weighted `weights[k]`; x moves as the
  /// rule says. Throws gradwire::error on a malformed payload, before x
  /// changes.
  void mix(float* x, const std::vector<int>& from, const std::vector<const std::vector<std::uint32_t>*>& got,
           const std::vector<float>& weights);
  /// A neighbour lost to the job: its estimate is dropped.
  void drop(int rank) { estimates_.erase(rank); }

  /// CHOCO's estimates for a checkpoint: own, then the neighbours' in rank
  /// order (empty for naive gossip), and back.
  std::vector<float> saved() const;
  void restore(const std::vector<float>& all);

private:
  compressor codec_;
  gossip_rule rule_;
  float gamma_;
  std::size_t n_;
  std::vector<float> own_;                     ///< CHOCO: x^_i; naive: Q(x_i) decoded
  std::map<int, std::vector<float>> estimates_; ///< CHOCO: x^_j by neighbour
  std::vector<float> scratch_;
};

} // namespace gradwire::models
