#include "models/batcher.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace gradwire::models {

std::vector<std::int64_t> shard_indices(std::int64_t n, int rank, int world, std::uint64_t seed) {
  check(world >= 1 && rank >= 0 && rank < world,
        "shard: rank " + std::to_string(rank) + " of world " + std::to_string(world));
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (world > 1) {
    std::mt19937_64 rng(seed ^ 0x5bd1e995ULL);
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  std::vector<std::int64_t> mine;
  for (std::size_t i = static_cast<std::size_t>(rank); i < perm.size(); i += static_cast<std::size_t>(world))
    mine.push_back(perm[i]);
  return mine;
}

namespace {

/// Per class, the share of each of `world` workers: Dirichlet(alpha) draws.
std::vector<std::vector<double>> class_shares(int classes, int world, double alpha, std::mt19937_64& rng) {
  std::vector<std::vector<double>> shares(static_cast<std::size_t>(classes));
  std::gamma_distribution<double> gamma(alpha, 1.0);
  for (auto& p : shares) {
    p.resize(static_cast<std::size_t>(world));
    double sum = 0;
    for (auto& v : p)
      sum += (v = gamma(rng));
    for (auto& v : p)
      v = sum > 0 ? v / sum : 1.0 / world; // (all draws 0 underflows: even shares)
  }
  return shares;
}

} // namespace

std::vector<std::int64_t> shard_indices(const dataset& data, int rank, int world, std::uint64_t seed, double alpha) {
  if (alpha <= 0 || world == 1)
    return shard_indices(data.size(), rank, world, seed);
  check(world >= 1 && rank >= 0 && rank < world,
        "shard: rank " + std::to_string(rank) + " of world " + std::to_string(world));
  check(data.label_width == 1, "data.partition = \"dirichlet\" splits by class label, and " + data.name +
                                 " has " + std::to_string(data.label_width) + " labels per sample (text): use \"iid\"");
  std::vector<std::vector<std::int64_t>> by_class(static_cast<std::size_t>(data.classes));
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const auto c = *data.label(i);
    check(c >= 0 && c < data.classes, "shard: label " + std::to_string(c) + " of sample " + std::to_string(i) +
                                        " outside [0, " + std::to_string(data.classes) + ")");
    by_class[static_cast<std::size_t>(c)].push_back(i);
  }
  std::mt19937_64 rng(seed ^ 0xd1e7c0deULL);
  const auto shares = class_shares(data.classes, world, alpha, rng);
  std::vector<std::int64_t> mine;
  for (std::size_t c = 0; c < by_class.size(); ++c) {
    auto& idx = by_class[c];
    std::shuffle(idx.begin(), idx.end(), rng);
    // Worker r takes [round(n * cum_r), round(n * cum_{r+1})) of the class.
    double cum = 0;
    for (int r = 0; r <= rank; ++r) {
      const auto from = static_cast<std::size_t>(std::llround(static_cast<double>(idx.size()) * cum));
      cum += shares[c][static_cast<std::size_t>(r)];
      const auto to = r == world - 1 ? idx.size()
                                     : std::min(idx.size(), static_cast<std::size_t>(std::llround(static_cast<double>(idx.size()) * cum)));
      if (r == rank)
        mine.insert(mine.end(), idx.begin() + static_cast<std::ptrdiff_t>(from), idx.begin() + static_cast<std::ptrdiff_t>(to));
    }
  }
  std::sort(mine.begin(), mine.end());
  if (mine.empty()) { // the skew, not the count: name the worker and its largest share
    double largest = 0;
    for (const auto& s : shares)
      largest = std::max(largest, s[static_cast<std::size_t>(rank)]);
    throw error("data.partition = \"dirichlet\", data.dirichlet_alpha = " + std::to_string(alpha) + ": worker " +
                std::to_string(rank) + " of " + std::to_string(world) + " drew no samples of the " +
                std::to_string(data.size()) + " (its largest share of any class is " + std::to_string(largest) +
                "): raise data.dirichlet_alpha (0.1 already gives each worker few classes), or use fewer workers");
  }
  return mine;
}

std::vector<std::int64_t> class_shard_indices(const dataset& data, int rank, int world, std::uint64_t seed,
                                              int classes) {
  check(world >= 1 && rank >= 0 && rank < world,
        "shard: rank " + std::to_string(rank) + " of world " + std::to_string(world));
  check(classes >= 1, "data.classes_per_worker must be 1 or more, got " + std::to_string(classes));
  check(data.label_width == 1, "data.partition = \"classes\" splits by class label, and " + data.name + " has " +
                                 std::to_string(data.label_width) + " labels per sample (text): use \"iid\"");
  const auto pieces = static_cast<std::int64_t>(world) * classes;
  check(data.size() >= pieces, "data.partition = \"classes\": " + std::to_string(world) + " workers x " +
                                 std::to_string(classes) + " classes need " + std::to_string(pieces) +
                                 " pieces, and " + data.name + " has " + std::to_string(data.size()) + " samples");
  std::vector<std::int64_t> order(static_cast<std::size_t>(data.size()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed ^ 0xc1a55e5ULL);
  std::shuffle(order.begin(), order.end(), rng);
  std::stable_sort(order.begin(), order.end(), [&data](std::int64_t a, std::int64_t b) {
    return *data.label(a) < *data.label(b);
  });
  std::vector<std::int64_t> deal(static_cast<std::size_t>(pieces));
  std::iota(deal.begin(), deal.end(), 0);
  std::shuffle(deal.begin(), deal.end(), rng);
  std::vector<std::int64_t> mine;
  for (int k = 0; k < classes; ++k) {
    const auto piece = deal[static_cast<std::size_t>(rank * classes + k)];
    const auto from = data.size() * piece / pieces, to = data.size() * (piece + 1) / pieces;
    mine.insert(mine.end(), order.begin() + from, order.begin() + to);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

std::vector<std::int64_t> contiguous_shard_indices(const dataset& data, int rank, int world) {
  check(!data.offsets.empty() && static_cast<std::int64_t>(data.offsets.size()) == data.size(),
        "data.partition = \"contiguous\" gives each worker its own stretch of a text corpus, and " + data.name +
          " is no text (use \"iid\", \"dirichlet\" or \"classes\")");
  check(world >= 1 && rank >= 0 && rank < world, "contiguous shard " + std::to_string(rank) + " of " + std::to_string(world));
  std::vector<std::int64_t> order(static_cast<std::size_t>(data.size()));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&data](std::int64_t a, std::int64_t b) {
    return data.offsets[static_cast<std::size_t>(a)] < data.offsets[static_cast<std::size_t>(b)];
  });
  const auto n = static_cast<std::int64_t>(order.size());
  const auto begin = n * rank / world, end = n * (rank + 1) / world;
  return {order.begin() + begin, order.begin() + end};
}

std::vector<std::int64_t> shard_indices(const dataset& data, int rank, int world, std::uint64_t seed,
                                        const partition_spec& p) {
  if (p.kind == "contiguous")
    return contiguous_shard_indices(data, rank, world);
  if (world > 1 && p.kind == "classes")
    return class_shard_indices(data, rank, world, seed, p.classes);
  return shard_indices(data, rank, world, seed, p.kind == "dirichlet" ? p.alpha : 0.0);
}

batcher::batcher(const dataset& data, std::vector<std::int64_t> indices, int batch_size,
                 std::uint64_t seed)
  : data_(data), indices_(std::move(indices)), batch_size_(batch_size), seed_(seed) {
  check(batch_size_ > 0, "batch size must be positive, got " + std::to_string(batch_size_));
  check(!indices_.empty(), "a worker's data shard is empty (more workers than samples?)");
  initial_ = indices_;
  shuffle();
}

void batcher::shuffle() {
  std::mt19937_64 rng(seed_ + 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(epoch_ + 1));
  std::shuffle(indices_.begin(), indices_.end(), rng);
}

void batcher::seek(int epoch, std::int64_t position) {
  check(epoch >= 0 && epoch < (1 << 24) && position >= 0 && position <= samples_per_epoch(),
        "data position epoch " + std::to_string(epoch) + ", sample " + std::to_string(position) + " is outside a shard of " +
          std::to_string(samples_per_epoch()) + " samples");
  // Each epoch's order is a shuffle of the one before: replay them.
  indices_ = initial_;
  epoch_ = 0;
  shuffle();
  while (epoch_ < epoch) {
    ++epoch_;
    shuffle();
  }
  pos_ = static_cast<std::size_t>(position);
}

void batcher::put_back(int samples) {
  check(samples >= 0 && static_cast<std::size_t>(samples) <= pos_,
        "batcher: cannot put back " + std::to_string(samples) + " samples at position " + std::to_string(pos_));
  pos_ -= static_cast<std::size_t>(samples);
}

void batcher::set_batch_size(int batch_size) {
  check(batch_size > 0, "batch size must be positive, got " + std::to_string(batch_size));
  batch_size_ = batch_size;
}

std::int64_t batcher::batches_per_epoch() const {
  return (samples_per_epoch() + batch_size_ - 1) / batch_size_;
}

bool batcher::next(batch& out, kernels::thread_pool* pool) {
  if (pos_ >= indices_.size()) {
    ++epoch_;
    pos_ = 0;
    shuffle();
    return false;
  }
  const auto m = static_cast<std::size_t>(data_.sample_numel());
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(batch_size_), indices_.size() - pos_);
  out.size = static_cast<int>(n);
  out.x.resize(n * m);
  const auto lw = static_cast<std::size_t>(data_.label_width);
  out.y.resize(n * lw);
  out.indices.assign(indices_.begin() + static_cast<std::ptrdiff_t>(pos_),
                     indices_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
  auto copy_rows = [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      const auto idx = indices_[pos_ + i];
      std::memcpy(out.x.data() + i * m, data_.image(idx), m * sizeof(float));
      std::memcpy(out.y.data() + i * lw, data_.label(idx), lw * sizeof(std::int32_t));
    }
  };
  const std::size_t parts = pool == nullptr ? 1 : std::min(pool->size(), n);
  if (parts <= 1)
    copy_rows(0, n);
  else
    pool->run(parts, [&](std::size_t t) { copy_rows(n * t / parts, n * (t + 1) / parts); });
  pos_ += n;
  return true;
}

bool batcher::next_full(batch& out, kernels::thread_pool* pool) {
  for (int tries = 0; tries < 3; ++tries) // at most: a partial batch, an epoch's end, a full batch
    if (next(out, pool) && out.size == batch_size_)
      return true;
  return false;
}

batcher worker_batcher(const dataset& data, int rank, int world, std::uint64_t seed, const partition_spec& p,
                       int batch_size) {
  return batcher(data, shard_indices(data, rank, world, seed, p), batch_size,
                 seed + static_cast<std::uint64_t>(rank));
}

} // namespace gradwire::models
