#pragma once
/// @file compress.hpp
/// Gradient compression with error feedback (compression.kind).
///
/// A worker compresses what it would send, c = g + e (its gradient plus
/// the residual e it kept from earlier steps), and keeps the new residual
/// e' = c - D(C(c)): what compression dropped is sent in later steps
/// instead of lost (EF-SGD, Karimireddy et al. 2019). Without error
/// feedback e stays 0.
///
/// Modes and their payloads, in 32-bit words (bytes = 4 x words):
/// - bf16: every value rounded to bfloat16 (nearest, ties to even), two to
///   a word: ceil(n / 2) words.
/// - topk: the k = ceil(ratio x n) values of largest magnitude (ties: the
///   lower index), as [k, indices ascending, values]: 1 + 2k words.
/// - randk: k values at indices drawn from (seed, step, rank), the same
///   payload as topk.
/// - sign: the scaled sign (||c||_1 / n) x sign(c), as [scale, one bit per
///   value]: 1 + ceil(n / 32) words.
/// - int8: blocks of 256 values, each with its scale max|c| / 127 and its
///   values rounded to the nearest integer multiple of it (ties to even),
///   as [the blocks' scales, four signed bytes a word]:
///   ceil(n / 256) + ceil(n / 4) words.
/// - powersgd: rank-r factors of every weight matrix (Vogels et al. 2019)
///   in two sums per step; see powersgd below.
///
/// A payload from the wire is hostile: decode checks its length, its
/// count and every index, and throws gradwire::error naming what is wrong.

#include "kernels/error.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gradwire::models {

enum class compress_mode { none, bf16, topk, randk, sign, powersgd, int8 };

/// int8's values per scale.
constexpr std::size_t int8_block = 256;

std::optional<compress_mode> compress_mode_of(std::string_view name);
const char* compress_name(compress_mode m);

struct compress_spec {
  compress_mode mode = compress_mode::none;
  double ratio = 0.01;       ///< topk, randk: the fraction of values sent
  int rank = 2;              ///< powersgd
  bool error_feedback = true;
  std::uint64_t seed = 1;    ///< randk's draws, powersgd's first Q
  /// A ring's first `warmup` steps sum the dense gradient instead (with
  /// Adam, its variance frozen from then on: optimizer_spec::freeze_variance_after).
  std::int64_t warmup = 0;
  /// After the warm-up, with Adam: each worker compresses its Adam momentum
  /// (optimizer::momentum_after) instead of its gradient, and the mean
  /// momentum makes the step (1-bit Adam).
  bool momentum = false;
  /// Each worker takes its own optimizer step on its own gradient (its
  /// optimizer state its own) and compresses that step, the change to its
  /// parameters, with error feedback; the mean step is added to every
  /// replica. What error feedback holds back is then parameter movement,
  /// which adds up linearly whatever the optimizer is.
  bool update = false;
};

/// How much of what a worker compressed its payload did not carry, in
/// squared norms: held = ||c - D(C(c))||^2 and total = ||c||^2, where c is
/// what was compressed (the gradient, or step, plus the residual). held /
/// total is the relative compression error, the 1 - delta of EF-SGD's
/// contraction ||C(x) - x||^2 <= (1 - delta) ||x||^2: for top-k, the share
/// of c's energy left for later steps. Pieces compressed apart add up.
struct compress_energy {
  double held = 0, total = 0;
  compress_energy& operator+=(const compress_energy& o) {
    held += o.held;
    total += o.total;
    return *this;
  }
  /// held / total; 0 when c was all zeros.
  double ratio() const { return total > 0 ? held / total : 0.0; }
};

/// What a payload costs on the wire for `n` values (one-round modes).
std::size_t payload_words(const compress_spec& s, std::size_t n);
/// topk and randk: how many values they keep of `n`.
std::size_t kept_count(double ratio, std::size_t n);

/// The one-round modes (bf16, topk, randk, sign, int8) for a buffer of n floats.
class compressor {
public:
  compressor(compress_spec spec, std::size_t n);

  /// Compresses g + e (step and rank seed randk's draws) into a payload
  /// and updates the residual.
  std::vector<std::uint32_t> encode(const float* g, std::int64_t step, int rank);
  /// Adds the payload's values times `scale` into out[0, n). Throws
  /// gradwire::error on a malformed payload, before writing anything.
  void accumulate(const std::uint32_t* words, std::size_t count, float scale, float* out) const;

  /// Throws gradwire::error naming what is wrong with a malformed payload.
  void check(const std::uint32_t* words, std::size_t count) const;

  const std::vector<float>& residual() const { return residual_; }
  std::vector<float>& residual() { return residual_; }
  std::size_t size() const { return n_; }
  /// The last encode's compression error.
  compress_energy last_energy() const { return energy_; }

private:
  std::vector<std::uint32_t> encode_bf16(const float* c) const;
  std::vector<std::uint32_t> encode_sparse(const float* c, std::int64_t step, int rank) const;
  std::vector<std::uint32_t> encode_sign(const float* c) const;
  std::vector<std::uint32_t> encode_int8(const float* c) const;

  compress_spec spec_;
  std::size_t n_;
  std::vector<float> residual_; ///< e; all zeros without error feedback
  std::vector<float> c_; ///< g + e without error feedback (with it, c is built in residual_)
  std::vector<float> dropped_; ///< without error feedback: c - D(C(c)), for energy_
  compress_energy energy_;
};

/// A tensor of the gradient buffer as PowerSGD sees it: [offset, offset +
/// rows x cols). A matrix is compressed when rank x (rows + cols) < rows x
/// cols; anything else (biases, norms, small matrices) is sent whole.
struct matrix_block {
  std::size_t offset = 0, rows = 1, cols = 1;
};

/// PowerSGD with error feedback, one step in two sums across workers:
///   1. P_i = M_i Q for each compressed matrix (M_i = g_i + e_i, Q shared),
///      and every uncompressed block whole: first_payload(); the workers'
///      payloads are summed (any allreduce).
///   2. second_payload(sum of 1): P^ = orthonormal(sum P), Q_i = M_i^T P^.
///      The Q_i are summed.
///   3. finish(sum of 2, scale, out): out = scale x (P^ Q^T and the summed
///      whole blocks); e_i = M_i - P^ Q_i^T; Q = the summed Q for the next
///      step (warm start).
/// Every worker computes the same P^ and Q from the same sums, so the
/// replicas stay equal.
class powersgd {
public:
  powersgd(compress_spec spec, std::vector<matrix_block> blocks, std::size_t n);

  std::vector<float> first_payload(const float* g);
  std::vector<float> second_payload(const std::vector<float>& summed_first);
  void finish(const std::vector<float>& summed_second, float scale, float* out);

  std::size_t first_floats() const { return first_floats_; }
  std::size_t second_floats() const { return second_floats_; }
  const std::vector<float>& residual() const { return residual_; }
  std::vector<float>& residual() { return residual_; }
  /// The shared Q factors, all matrices back to back (checkpoints keep them).
  std::vector<float>& q() { return q_; }
  /// The last step's compression error (of M against this worker's own
  /// P^ Q_i^T; blocks sent whole hold nothing back), known after finish.
  compress_energy last_energy() const { return energy_; }

private:
  bool compressed(const matrix_block& b) const;

  compress_spec spec_;
  std::vector<matrix_block> blocks_;
  std::size_t n_;
  std::size_t first_floats_ = 0, second_floats_ = 0;
  std::vector<float> residual_, m_, q_, p_hat_, summed_first_, q_own_;
  compress_energy energy_;
};

/// A parameter buffer of `size` floats as blocks covering it in order:
/// tensors of two or more dimensions as [shape[0], the rest], the others
/// and the padding between them as [1, length].
struct param_layout;
std::vector<matrix_block> matrix_blocks(const param_layout& layout, std::size_t size);

} // namespace gradwire::models
