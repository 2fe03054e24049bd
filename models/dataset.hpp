#pragma once
/// @file dataset.hpp
/// In-memory datasets: samples as floats (images in [0, 1], NCHW, one
/// sample after another; or a text window's token ids), labels as int32,
/// `label_width` per sample (1 for an image's class; a text window's next
/// token at each of its positions). Readers for the IDX
/// format (MNIST, Fashion-MNIST; gzipped or not), the CIFAR-10 binary
/// format, and a seeded synthetic dataset. Every reader validates sizes and
/// throws gradwire::error naming the file and what is wrong.

#include <cstdint>
#include <string>
#include <vector>

namespace gradwire::models {

struct dataset {
  std::string name;
  int channels = 1, height = 28, width = 28, classes = 10;
  /// Ordinary pages, not huge ones: on a VM the first touch of fresh huge
  /// pages is paid at every process start, and outweighs what a batch's
  /// random gather saves in TLB misses (bench/RESULTS.md, "Figures behind
  /// the code").
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  int label_width = 1; ///< labels per sample
  /// Text: each window's first byte in the corpus (data.partition =
  /// "contiguous" splits by it); empty for images.
  std::vector<std::int64_t> offsets;

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()) / label_width; }
  const std::int32_t* label(std::int64_t i) const { return labels.data() + i * label_width; }
  std::int64_t sample_numel() const { return static_cast<std::int64_t>(channels) * height * width; }
  const float* image(std::int64_t i) const { return images.data() + i * sample_numel(); }
  /// The first `n` samples (all when n <= 0 or n >= size()).
  dataset head(std::int64_t n) const;
  /// Keeps only the first `n` samples, in place (all when n <= 0 or n >= size()).
  void keep_first(std::int64_t n);
};

/// Reads an IDX image file (magic 0x00000803) and label file (0x00000801).
/// Files may be gzipped. `classes` bounds the label values. `limit` > 0:
/// only the first `limit` samples are inflated and converted
/// (data.train_subset); what lies past them is not read, so not checked.
dataset load_idx(const std::string& images_path, const std::string& labels_path, int classes = 10,
                 std::int64_t limit = 0);

/// Loads the train or test split of MNIST-layout data from `dir`
/// ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]); `limit` as load_idx's.
dataset load_mnist_dir(const std::string& dir, bool train, const std::string& name, std::int64_t limit = 0);

/// Reads CIFAR-10 binary files (each record: 1 label byte, 3072 pixel bytes).
/// `limit` > 0: only the first `limit` records, in file order, are read.
dataset load_cifar10_files(const std::vector<std::string>& paths, std::int64_t limit = 0);
/// data_batch_{1..5}.bin or test_batch.bin from `dir`; `limit` as above.
dataset load_cifar10_dir(const std::string& dir, bool train, std::int64_t limit = 0);

/// A learnable synthetic dataset: per class a random template, each sample
/// its template plus noise, clipped to [0, 1]. Same seed, same data.
dataset make_synthetic(std::int64_t n, int channels, int height, int width, int classes,
                       std::uint64_t seed);

/// Byte-level language-model data from a text file or a folder of them
/// (`path`; folders are read in name order, their regular files only, and
/// a file holding a NUL byte is skipped as not text). Lines that are only
/// "%" (the fortune files' separators) are dropped. The last `val_fraction`
/// of the bytes is the validation split, in consecutive windows; training
/// windows start at offsets drawn from `seed`, as many as the training
/// bytes hold whole windows. A sample is `context` token ids, its labels
/// the `context` bytes after each. Throws gradwire::error for a path that
/// cannot be read, or text too short for a window in either split.
struct text_splits {
  dataset train, test;
  std::int64_t bytes = 0, files = 0;
};
text_splits load_text(const std::string& path, int context, double val_fraction, std::uint64_t seed);

/// Language-model data from token files, nanoGPT's .bin format (token
/// ids as little-endian uint16, nothing else): `path` is one file, whose
/// last `val_fraction` of ids is the validation split, or a folder holding
/// train.bin and val.bin (as nanoGPT's prepare.py scripts write them;
/// scripts/tokenize.py makes them from any text). Every id must be below
/// `vocab`. Windows as load_text's, of ids over `vocab` classes. Throws
/// gradwire::error naming the file, and for a bad id its position.
struct token_splits {
  dataset train, test;
  std::int64_t train_tokens = 0, val_tokens = 0;
  bool one_file = false; ///< split by val_fraction, not train.bin and val.bin
};
token_splits load_tokens(const std::string& path, int context, int vocab, double val_fraction, std::uint64_t seed);

/// The default corpus: the Debian package fortunes' files.
inline const char* fortunes_default_dir = "/usr/share/games/fortunes";

/// The default location of Fashion-MNIST (Debian package dataset-fashion-mnist).
inline const char* fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";

} // namespace gradwire::models
