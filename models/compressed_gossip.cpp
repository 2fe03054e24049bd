#include "models/compressed_gossip.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <string>

namespace gradwire::models {

namespace {

compress_spec without_feedback(compress_spec s) {
  s.error_feedback = false;
  return s;
}

} // namespace

float consensus_step(const compress_spec& spec) {
  switch (spec.mode) {
  case compress_mode::topk:
  case compress_mode::randk: return static_cast<float>(std::min(1.0, 2 * spec.ratio));
  case compress_mode::sign: return 0.5f;
  default: return 1.f; // bf16, int8: nearly every bit of the change
  }
}

compressed_gossip::compressed_gossip(compress_spec spec, gossip_rule rule, float gamma, std::size_t n,
                                     const std::vector<int>& neighbours)
    : codec_(without_feedback(spec), n), rule_(rule), gamma_(gamma == 0.f ? consensus_step(spec) : gamma), n_(n),
      own_(n, 0.f) {
  gradwire::check(gamma >= 0.f && gamma <= 1.f, "compressed gossip: the consensus step must be in (0, 1], or 0 for automatic");
  if (rule == gossip_rule::choco)
    for (int r : neighbours)
      estimates_[r].assign(n, 0.f);
  else
    scratch_.assign(n, 0.f);
}

std::vector<std::uint32_t> compressed_gossip::payload(const float* x, std::int64_t step, int rank) {
  if (rule_ == gossip_rule::naive) {
    auto words = codec_.encode(x, step, rank);
    std::fill(own_.begin(), own_.end(), 0.f);
    codec_.accumulate(words.data(), words.size(), 1.f, own_.data());
    return words;
  }
  std::vector<float> diff(n_);
  for (std::size_t i = 0; i < n_; ++i)
    diff[i] = x[i] - own_[i];
  auto words = codec_.encode(diff.data(), step, rank);
  codec_.accumulate(words.data(), words.size(), 1.f, own_.data());
  return words;
}

void compressed_gossip::mix(float* x, const std::vector<int>& from,
                            const std::vector<const std::vector<std::uint32_t>*>& got, const std::vector<float>& weights) {
  gradwire::check(from.size() == got.size() && weights.size() >= from.size(), "compressed gossip: payloads do not match the graph");
  for (std::size_t k = 0; k < from.size(); ++k) { // every payload checked before anything moves
    gradwire::check(rule_ == gossip_rule::naive || estimates_.count(from[k]) == 1,
          "compressed gossip: a payload from rank " + std::to_string(from[k]) + ", not a neighbour");
    try {
      codec_.check(got[k]->data(), got[k]->size());
    } catch (const error& e) {
      throw error("rank " + std::to_string(from[k]) + " sent " + e.what());
    }
  }
  float total = 0.f;
  for (std::size_t k = 0; k < from.size(); ++k) {
    const float w = gamma_ * weights[k];
    total += w;
    const float* hat = nullptr;
    if (rule_ == gossip_rule::choco) {
      auto& e = estimates_[from[k]];
      codec_.accumulate(got[k]->data(), got[k]->size(), 1.f, e.data());
      hat = e.data();
    } else {
      std::fill(scratch_.begin(), scratch_.end(), 0.f);
      codec_.accumulate(got[k]->data(), got[k]->size(), 1.f, scratch_.data());
      hat = scratch_.data();
    }
    for (std::size_t i = 0; i < n_; ++i)
      x[i] += w * hat[i];
  }
  for (std::size_t i = 0; i < n_; ++i)
    x[i] -= total * own_[i];
}

std::vector<float> compressed_gossip::saved() const {
  if (rule_ == gossip_rule::naive)
    return {};
  std::vector<float> all(own_);
  for (const auto& [r, e] : estimates_)
    all.insert(all.end(), e.begin(), e.end());
  return all;
}

void compressed_gossip::restore(const std::vector<float>& all) {
  const auto want = rule_ == gossip_rule::naive ? 0 : n_ * (1 + estimates_.size());
  gradwire::check(all.size() == want, "compressed gossip: a checkpoint's estimates hold " + std::to_string(all.size()) +
                              " floats, this worker keeps " + std::to_string(want));
  if (want == 0)
    return;
  auto at = all.begin();
  std::copy(at, at + static_cast<std::ptrdiff_t>(n_), own_.begin());
  for (auto& [r, e] : estimates_) {
    at += static_cast<std::ptrdiff_t>(n_);
    std::copy(at, at + static_cast<std::ptrdiff_t>(n_), e.begin());
  }
}

} // namespace gradwire::models
