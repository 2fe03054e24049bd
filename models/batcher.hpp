#pragma once
/// @file batcher.hpp
/// Deterministic sharding and shuffled mini-batches. Worker `rank` of
/// `world` owns samples rank, rank + world, ... of a seeded global
/// permutation, so shards are disjoint, cover the dataset, and are the same
/// on every machine for the same seed.

#include "kernels/thread_pool.hpp"
#include "models/dataset.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::models {

/// How a training set is split over the workers (data.partition).
struct partition_spec {
  std::string kind = "iid"; ///< "iid" | "dirichlet" | "classes" | "contiguous"
  double alpha = 0.5;       ///< dirichlet: the concentration
  int classes = 2;          ///< classes: the one-class shards each worker gets
  bool by_label() const { return kind == "dirichlet" || kind == "classes"; }
};

/// Indices of worker `rank`'s shard (world >= 1, 0 <= rank < world).
std::vector<std::int64_t> shard_indices(std::int64_t n, int rank, int world, std::uint64_t seed);

/// Worker `rank`'s shard with the labels skewed across workers (Hsu et
/// al. 2019): for each class, proportions over the workers are drawn from
/// a symmetric Dirichlet(alpha), and the class's samples (in a seeded
/// order) are split by them. Small alpha: each worker sees few classes;
/// large alpha: close to IID. Every worker draws the same split from
/// `seed`, so shards are disjoint and cover the data. alpha <= 0 is
/// shard_indices' IID split. Throws gradwire::error for data without one
/// class label per sample (text windows).
std::vector<std::int64_t> shard_indices(const dataset& data, int rank, int world, std::uint64_t seed, double alpha);

/// Worker `rank`'s shard with `classes` classes (McMahan et al. 2017's
/// pathological non-IID split): the samples, sorted by label in a seeded
/// order, are cut into world x classes equal pieces, and each worker gets
/// `classes` of them, dealt from a seeded shuffle. With as many pieces as
/// classes or more, a piece holds one class (two where it straddles a
/// class boundary), so each worker sees about `classes` classes; shards
/// are disjoint and cover the data. Throws
/// gradwire::error for data without a class label per sample, or fewer
/// samples than pieces.
std::vector<std::int64_t> class_shard_indices(const dataset& data, int rank, int world, std::uint64_t seed,
                                              int classes);

/// Worker `rank`'s shard of text windows from its own stretch of the
/// corpus: the windows in the order of their first byte (dataset::offsets),
/// cut into `world` consecutive runs as even as the count allows; worker
/// `rank` takes run `rank`. Disjoint, covering, no seed needed. Throws
/// gradwire::error for data without offsets (images).
std::vector<std::int64_t> contiguous_shard_indices(const dataset& data, int rank, int world);

/// Worker `rank`'s shard as `p` says (iid, dirichlet, classes or contiguous).
std::vector<std::int64_t> shard_indices(const dataset& data, int rank, int world, std::uint64_t seed,
                                        const partition_spec& p);

class batcher;

/// Worker `rank`'s batches as a worker draws them: its shard of `data`
/// (shard_indices with `seed` and `p`), shuffled from seed + rank.
batcher worker_batcher(const dataset& data, int rank, int world, std::uint64_t seed, const partition_spec& p,
                       int batch_size);

/// Host-side batch buffers.
struct batch {
  std::vector<float> x;
  std::vector<std::int32_t> y; ///< size * the dataset's label_width
  std::vector<std::int64_t> indices; ///< the samples' indices in the dataset, in batch order
  int size = 0;                 ///< samples
};

class batcher {
public:
  /// Batches of `batch_size` from `indices` of `data`, reshuffled every
  /// epoch with a seed derived from `seed` and the epoch number. The last
  /// batch of an epoch may be smaller (as PyTorch's DataLoader by default).
  batcher(const dataset& data, std::vector<std::int64_t> indices, int batch_size,
          std::uint64_t seed);

  /// Fills `out` with the next batch; returns false (and fills nothing) at
  /// the end of an epoch, after which the next call starts a new epoch.
  /// With a `pool`, its threads copy the rows (scattered over the dataset,
  /// so a batch gather waits on DRAM: 2 threads halve it).
  bool next(batch& out, kernels::thread_pool* pool = nullptr);
  /// The next batch of exactly batch_size() samples, skipping an epoch's
  /// partial last batch, as a worker's steps take them (every step of every
  /// worker has the same size). False when the shard holds no full batch.
  bool next_full(batch& out, kernels::thread_pool* pool = nullptr);
  int epoch() const { return epoch_; }
  /// Where the next batch starts: the epoch and the offset into its order.
  std::int64_t position() const { return static_cast<std::int64_t>(pos_); }
  /// Puts the batcher where position() and epoch() said (a checkpoint's
  /// resume): the same order and the same next batch, bit for bit. Throws
  /// gradwire::error for a place outside the shard.
  void seek(int epoch, std::int64_t position);
  /// Puts back the last batch next() gave (`samples` of them: a step
  /// abandoned before it counted): the next call gives the same batch.
  void put_back(int samples);
  /// Batches from the next call on have `batch_size` samples (speed
  /// balancing moves a worker's share of the global batch during a run).
  void set_batch_size(int batch_size);
  int batch_size() const { return batch_size_; }
  std::int64_t batches_per_epoch() const;
  std::int64_t samples_per_epoch() const { return static_cast<std::int64_t>(indices_.size()); }

private:
  void shuffle();
  const dataset& data_;
  std::vector<std::int64_t> indices_;
  std::vector<std::int64_t> initial_; ///< the shard's order before any shuffle (seek replays from it)
  int batch_size_;
  std::uint64_t seed_;
  int epoch_ = 0;
  std::size_t pos_ = 0;
};

} // namespace gradwire::models
