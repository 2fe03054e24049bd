// Dataset readers on small files written here: well-formed (plain and
// gzipped), truncated, corrupt, inconsistent. Every failure is a
// gradwire::error naming the file, never a crash.
#include "kernels/error.hpp"
#include "models/batcher.hpp"
#include "models/dataset.hpp"

#include <catch2/catch.hpp>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <set>

using namespace gradwire;
using namespace gradwire::models;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("gw-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void put_be32(std::vector<unsigned char>& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8)
    b.push_back(static_cast<unsigned char>(v >> s));
}

std::vector<unsigned char> idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  std::vector<unsigned char> b;
  put_be32(b, 0x803);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t i = 0; i < n * rows * cols; ++i)
    b.push_back(static_cast<unsigned char>((i * 7) % 256));
  return b;
}

std::vector<unsigned char> idx_labels(std::uint32_t n, unsigned char mod = 10) {
  std::vector<unsigned char> b;
  put_be32(b, 0x801);
  put_be32(b, n);
  for (std::uint32_t i = 0; i < n; ++i)
    b.push_back(static_cast<unsigned char>(i % mod));
  return b;
}

void write_raw(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gz(const std::string& path, const std::vector<unsigned char>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}

} // namespace

TEST_CASE("IDX reader: plain and gzipped files give the same data") {
  temp_dir d;
  auto img = idx_images(5, 3, 4);
  auto lab = idx_labels(5);
  write_raw(d / "i", img);
  write_raw(d / "l", lab);
  write_gz(d / "i.gz", img);
  write_gz(d / "l.gz", lab);
  auto a = load_idx(d / "i", d / "l");
  auto b = load_idx(d / "i.gz", d / "l.gz");
  CHECK(a.size() == 5);
  CHECK(a.height == 3);
  CHECK(a.width == 4);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  CHECK(a.labels[3] == 3);
  CHECK(a.images[1] == Approx(7.f / 255.f));
}

TEST_CASE("IDX reader: a limit reads only the first samples, the same as keeping the first of all") {
  temp_dir d;
  auto img = idx_images(7, 3, 4);
  auto lab = idx_labels(7);
  write_gz(d / "i.gz", img);
  write_gz(d / "l.gz", lab);
  const auto all = load_idx(d / "i.gz", d / "l.gz");
  for (std::int64_t limit : {1, 3, 7, 50}) {
    INFO("limit " << limit);
    const auto some = load_idx(d / "i.gz", d / "l.gz", 10, limit);
    const auto want = all.head(limit);
    CHECK(some.size() == std::min<std::int64_t>(limit, 7));
    CHECK(some.images == want.images);
    CHECK(some.labels == want.labels);
  }
  // What lies past the limit is not read: a file cut after the third image
  // serves a limit of 3, and is still refused without one.
  auto cut = img;
  cut.resize(16 + 3 * 12 + 5);
  write_raw(d / "cut", cut);
  CHECK(load_idx(d / "cut", d / "l.gz", 10, 3).size() == 3);
  CHECK_THROWS_WITH(load_idx(d / "cut", d / "l.gz", 10, 4), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(load_idx(d / "cut", d / "l.gz"), Catch::Contains("truncated"));
  // The header's counts are still checked against each other.
  write_raw(d / "l4", idx_labels(4));
  CHECK_THROWS_WITH(load_idx(d / "i.gz", d / "l4", 10, 2), Catch::Contains("4 labels for 7 images"));
}

TEST_CASE("IDX reader: truncated, corrupt and inconsistent files are clear errors") {
  temp_dir d;
  auto img = idx_images(5, 3, 4);
  auto lab = idx_labels(5);
  write_raw(d / "l", lab);

  auto truncated = img;
  truncated.resize(img.size() - 10);
  write_raw(d / "trunc", truncated);
  CHECK_THROWS_WITH(load_idx(d / "trunc", d / "l"),
                    Catch::Contains("trunc") && Catch::Contains("truncated"));

  auto gz_trunc_path = d / "trunc.gz";
  write_gz(gz_trunc_path, img);
  fs::resize_file(gz_trunc_path, fs::file_size(gz_trunc_path) / 2);
  CHECK_THROWS_AS(load_idx(gz_trunc_path, d / "l"), gradwire::error);

  auto bad_magic = img;
  bad_magic[3] = 0x01;
  write_raw(d / "magic", bad_magic);
  CHECK_THROWS_WITH(load_idx(d / "magic", d / "l"), Catch::Contains("not an IDX image file"));

  write_raw(d / "i", img);
  write_raw(d / "l4", idx_labels(4));
  CHECK_THROWS_WITH(load_idx(d / "i", d / "l4"), Catch::Contains("4 labels for 5 images"));

  auto bad_label = idx_labels(5);
  bad_label.back() = 11;
  write_raw(d / "l11", bad_label);
  CHECK_THROWS_WITH(load_idx(d / "i", d / "l11"), Catch::Contains("label 11 at index 4"));

  std::vector<unsigned char> garbage(100, 0xAB);
  write_raw(d / "garbage", garbage);
  CHECK_THROWS_AS(load_idx(d / "garbage", d / "l"), gradwire::error);
  write_raw(d / "empty", {});
  CHECK_THROWS_WITH(load_idx(d / "empty", d / "l"), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(load_idx(d / "missing", d / "l"), Catch::Contains("not found"));
}

TEST_CASE("MNIST-layout folder: a missing dataset names the package") {
  temp_dir d;
  CHECK_THROWS_WITH(load_mnist_dir(d.path.string(), true, "fashion-mnist"),
                    Catch::Contains("dataset-fashion-mnist"));
}

TEST_CASE("CIFAR-10 reader: records, truncation, bad labels") {
  temp_dir d;
  std::vector<unsigned char> rec;
  for (int r = 0; r < 3; ++r) {
    rec.push_back(static_cast<unsigned char>(r + 2));
    for (int i = 0; i < 3072; ++i)
      rec.push_back(static_cast<unsigned char>((i + r) % 256));
  }
  write_raw(d / "ok.bin", rec);
  auto ds = load_cifar10_files({d / "ok.bin"});
  CHECK(ds.size() == 3);
  CHECK(ds.channels == 3);
  CHECK(ds.labels == std::vector<std::int32_t>{2, 3, 4});
  CHECK(ds.image(1)[1024] == Approx(static_cast<float>((1024 + 1) % 256) / 255.f)); // green plane

  auto cut = rec;
  cut.resize(rec.size() - 5);
  write_raw(d / "cut.bin", cut);
  CHECK_THROWS_WITH(load_cifar10_files({d / "cut.bin"}), Catch::Contains("cut.bin") && Catch::Contains("records"));
  rec[0] = 200;
  write_raw(d / "label.bin", rec);
  CHECK_THROWS_WITH(load_cifar10_files({d / "label.bin"}), Catch::Contains("label 200"));
  CHECK_THROWS_WITH(load_cifar10_dir(d.path.string(), true), Catch::Contains("data_batch_1.bin"));
}

TEST_CASE("CIFAR-10 reader: a limit reads the first records across files, the same as keeping the first of all") {
  temp_dir d;
  auto records = [](int count, int first) {
    std::vector<unsigned char> b;
    for (int r = first; r < first + count; ++r) {
      b.push_back(static_cast<unsigned char>(r % 10));
      for (int i = 0; i < 3072; ++i)
        b.push_back(static_cast<unsigned char>((i * 3 + r) % 256));
    }
    return b;
  };
  write_raw(d / "a.bin", records(3, 0));
  write_raw(d / "b.bin", records(2, 3));
  const auto all = load_cifar10_files({d / "a.bin", d / "b.bin"});
  REQUIRE(all.size() == 5);
  CHECK(all.labels == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  for (std::int64_t limit : {1, 3, 4, 5, 9}) {
    INFO("limit " << limit);
    const auto some = load_cifar10_files({d / "a.bin", d / "b.bin"}, limit);
    const auto want = all.head(limit);
    CHECK(some.size() == std::min<std::int64_t>(limit, 5));
    CHECK(some.images == want.images);
    CHECK(some.labels == want.labels);
  }
  // Every file is still checked for whole records, even one past the limit.
  auto cut = records(2, 0);
  cut.pop_back();
  write_raw(d / "cut.bin", cut);
  CHECK_THROWS_WITH(load_cifar10_files({d / "a.bin", d / "cut.bin"}, 2), Catch::Contains("cut.bin"));
}

TEST_CASE("synthetic dataset is deterministic and in range") {
  auto a = make_synthetic(50, 1, 6, 6, 4, 9);
  auto b = make_synthetic(50, 1, 6, 6, 4, 9);
  auto c = make_synthetic(50, 1, 6, 6, 4, 10);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  CHECK(a.images != c.images);
  for (float v : a.images)
    CHECK((v >= 0.f && v <= 1.f));
  CHECK_THROWS_AS(make_synthetic(0, 1, 2, 2, 2, 1), gradwire::error);
}

TEST_CASE("sharding is deterministic, disjoint and complete for N = 1..8") {
  const std::int64_t n = 103; // not divisible by most N
  for (int world = 1; world <= 8; ++world) {
    std::set<std::int64_t> seen;
    std::size_t total = 0;
    for (int rank = 0; rank < world; ++rank) {
      auto s = shard_indices(n, rank, world, 5);
      CHECK(s == shard_indices(n, rank, world, 5));
      CHECK(static_cast<std::int64_t>(s.size()) >= n / world);
      CHECK(static_cast<std::int64_t>(s.size()) <= n / world + 1);
      total += s.size();
      seen.insert(s.begin(), s.end());
    }
    CHECK(total == static_cast<std::size_t>(n));
    CHECK(seen.size() == static_cast<std::size_t>(n));
  }
  CHECK_THROWS_AS(shard_indices(10, 3, 3, 1), gradwire::error);
}

TEST_CASE("batcher: every sample once per epoch, reshuffled, last batch partial") {
  auto ds = make_synthetic(10, 1, 2, 2, 3, 1);
  batcher b(ds, shard_indices(ds.size(), 0, 1, 1), 4, 7);
  CHECK(b.batches_per_epoch() == 3);
  std::vector<std::vector<float>> epochs(2);
  for (int e = 0; e < 2; ++e) {
    batch bt;
    std::vector<int> sizes;
    while (b.next(bt)) {
      sizes.push_back(bt.size);
      epochs[static_cast<std::size_t>(e)].insert(epochs[static_cast<std::size_t>(e)].end(), bt.x.begin(), bt.x.end());
    }
    CHECK(sizes == std::vector<int>{4, 4, 2});
  }
  CHECK(epochs[0] != epochs[1]); // different order
  auto s0 = epochs[0], s1 = epochs[1];
  std::sort(s0.begin(), s0.end());
  std::sort(s1.begin(), s1.end());
  CHECK(s0 == s1); // same samples
}

TEST_CASE("batcher: gathering on a thread pool gives the same batches, partial ones included") {
  auto ds = make_synthetic(23, 1, 3, 3, 5, 2);
  batcher serial(ds, shard_indices(ds.size(), 0, 1, 1), 8, 5);
  kernels::thread_pool pool(3);
  batcher pooled(ds, shard_indices(ds.size(), 0, 1, 1), 8, 5);
  batch a, b;
  int batches = 0;
  for (int i = 0; i < 8; ++i) { // two epochs of 8, 8, 7 and the ends between them
    const bool more = serial.next(a);
    REQUIRE(pooled.next(b, &pool) == more);
    if (!more)
      continue;
    ++batches;
    CHECK(a.size == b.size);
    CHECK(a.x == b.x);
    CHECK(a.y == b.y);
  }
  CHECK(batches == 6);
}

TEST_CASE("head and keep_first: the first n samples, all when n <= 0 or n >= size") {
  const auto ds = make_synthetic(10, 1, 2, 3, 4, 9);
  const auto h = ds.head(4);
  REQUIRE(h.size() == 4);
  CHECK(std::vector<float>(h.images.begin(), h.images.end()) ==
        std::vector<float>(ds.images.begin(), ds.images.begin() + 4 * 6));
  CHECK(std::vector<std::int32_t>(h.labels.begin(), h.labels.end()) ==
        std::vector<std::int32_t>(ds.labels.begin(), ds.labels.begin() + 4));
  auto k = ds;
  k.keep_first(4);
  CHECK(k.images == h.images);
  CHECK(k.labels == h.labels);
  for (std::int64_t n : {0, -1, 10, 11}) {
    auto all = ds;
    all.keep_first(n);
    CHECK(all.size() == 10);
    CHECK(all.images == ds.images);
    CHECK(ds.head(n).size() == 10);
  }
}

TEST_CASE("Dirichlet shards are disjoint, cover the data, repeat from the seed, and skew the labels as alpha says") {
  const auto data = make_synthetic(3000, 1, 4, 4, 10, 3);
  const int world = 4;
  // The largest class's share of each worker's shard, averaged over workers.
  auto top_share = [&](double alpha, std::uint64_t seed) {
    std::vector<int> seen(static_cast<std::size_t>(data.size()), 0);
    double top = 0;
    for (int r = 0; r < world; ++r) {
      const auto mine = shard_indices(data, r, world, seed, alpha);
      CHECK(mine == shard_indices(data, r, world, seed, alpha));
      std::vector<int> counts(10, 0);
      for (auto i : mine) {
        ++seen[static_cast<std::size_t>(i)];
        ++counts[static_cast<std::size_t>(*data.label(i))];
      }
      top += mine.empty() ? 0 : static_cast<double>(*std::max_element(counts.begin(), counts.end())) / mine.size();
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    return top / world;
  };
  const double skewed = top_share(0.1, 5), mild = top_share(1.0, 5), flat = top_share(1000, 5);
  INFO("largest class share: alpha 0.1 " << skewed << ", 1 " << mild << ", 1000 " << flat);
  CHECK(skewed > 0.35); // 4 workers, 10 classes: each sees about 2.5 of them
  CHECK(flat < 0.15); // 10 classes: 0.1 each when even
  CHECK(skewed > mild);
  CHECK(mild > flat);
  CHECK(shard_indices(data, 1, world, 5, 0.1) != shard_indices(data, 1, world, 6, 0.1));
  CHECK(shard_indices(data, 2, world, 5, 0.0) == shard_indices(data.size(), 2, world, 5)); // alpha 0: IID
}

TEST_CASE("Class shards give each worker about k classes, are disjoint, cover the data and repeat from the seed") {
  const auto data = make_synthetic(3000, 1, 4, 4, 10, 3);
  // 10 classes of about 300 samples: a piece of n / (world k) samples
  // spans at most ceil(10 / (world k)) + 1 classes.
  for (const auto& [world, k] : {std::pair{5, 2}, std::pair{3, 4}, std::pair{4, 1}}) {
    std::vector<int> seen(static_cast<std::size_t>(data.size()), 0);
    int most = 0, total = 0;
    for (int r = 0; r < world; ++r) {
      const auto mine = class_shard_indices(data, r, world, 7, k);
      CHECK(mine == class_shard_indices(data, r, world, 7, k));
      CHECK(mine == shard_indices(data, r, world, 7, partition_spec{"classes", 0.5, k}));
      std::set<int> classes;
      for (auto i : mine) {
        ++seen[static_cast<std::size_t>(i)];
        classes.insert(*data.label(i));
      }
      most = std::max(most, static_cast<int>(classes.size()));
      total += static_cast<int>(classes.size());
    }
    INFO(world << " workers x " << k << ": at most " << most << " classes, " << total << " in all");
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    const int span = (10 + world * k - 1) / (world * k) + 1;
    CHECK(most <= k * span);
    CHECK(total >= std::min(10, world * k)); // every class is someone's
  }
  CHECK(class_shard_indices(data, 1, 5, 7, 2) != class_shard_indices(data, 1, 5, 8, 2));
  CHECK_THROWS_WITH(class_shard_indices(data, 0, 2000, 7, 2), Catch::Contains("need 4000 pieces"));
  CHECK(shard_indices(data, 0, 1, 7, partition_spec{"classes", 0.5, 2}).size() == 3000); // one worker: all of it
}

namespace {
/// `n` text windows of 4 bytes (what load_text makes, without a corpus).
dataset tiny_text(std::int64_t n) {
  dataset text;
  text.name = "text";
  text.label_width = 4;
  text.classes = 256;
  text.images.assign(static_cast<std::size_t>(n) * 4, 0.f);
  text.labels.assign(static_cast<std::size_t>(n) * 4, 1);
  return text;
}
} // namespace

TEST_CASE("A Dirichlet split of text windows is refused: they have no class") {
  const auto text = tiny_text(8);
  CHECK_THROWS_WITH(shard_indices(text, 0, 2, 1, 0.5), Catch::Contains("use \"iid\""));
  CHECK_THROWS_WITH(class_shard_indices(text, 0, 2, 1, 2), Catch::Contains("use \"iid\""));
}

TEST_CASE("Contiguous text shards are runs of the corpus in order of position, disjoint and covering, and images are refused") {
  auto text = tiny_text(10);
  text.offsets = {90, 10, 50, 0, 70, 30, 80, 20, 60, 40}; // windows at seeded offsets, as load_text draws them
  std::set<std::int64_t> seen;
  std::int64_t last_end = -1;
  for (int rank = 0; rank < 3; ++rank) {
    const auto mine = shard_indices(text, rank, 3, 1, partition_spec{"contiguous", 0.5, 2});
    CHECK(mine.size() == (rank == 2 ? 4u : 3u)); // 10 windows over 3: runs of 3, 3, 4
    for (std::size_t k = 0; k < mine.size(); ++k) {
      const auto at = text.offsets[static_cast<std::size_t>(mine[k])];
      CHECK(at > last_end); // after every window of the workers before, and of its own run
      last_end = at;
      CHECK(seen.insert(mine[k]).second);
    }
  }
  CHECK(seen.size() == 10u);
  CHECK(shard_indices(text, 0, 1, 1, partition_spec{"contiguous", 0.5, 2}).size() == 10u);
  dataset images = make_synthetic(64, 1, 28, 28, 10, 3);
  CHECK_THROWS_WITH(contiguous_shard_indices(images, 0, 2), Catch::Contains("is no text"));
}

namespace {
/// `ids` as a .bin file: little-endian uint16 each.
void write_ids(const std::string& path, const std::vector<std::uint16_t>& ids) {
  std::ofstream f(path, std::ios::binary);
  for (auto id : ids) {
    const char b[2] = {static_cast<char>(id & 0xff), static_cast<char>(id >> 8)};
    f.write(b, 2);
  }
}
} // namespace

TEST_CASE("Token files: train.bin and val.bin give windows of their ids, labels the next ids, above 255 too") {
  temp_dir d;
  std::vector<std::uint16_t> train(500), val(41);
  for (std::size_t i = 0; i < train.size(); ++i)
    train[i] = static_cast<std::uint16_t>((i * 7919) % 1000); // ids up to 999: past a byte
  for (std::size_t i = 0; i < val.size(); ++i)
    val[i] = static_cast<std::uint16_t>(999 - i);
  write_ids(d / "train.bin", train);
  write_ids(d / "val.bin", val);
  const auto t = load_tokens(d.path.string(), 8, 1000, 0.1, 5);
  CHECK(t.train_tokens == 500);
  CHECK(t.val_tokens == 41);
  CHECK_FALSE(t.one_file);
  REQUIRE(t.train.size() == 500 / 8);
  REQUIRE(t.test.size() == 40 / 8); // consecutive windows of val.bin, each with the id after it
  CHECK(t.train.classes == 1000);
  CHECK(t.train.label_width == 8);
  for (std::int64_t w = 0; w < t.train.size(); ++w) {
    const auto at = static_cast<std::size_t>(t.train.offsets[static_cast<std::size_t>(w)]);
    REQUIRE(at + 8 < train.size());
    for (std::size_t j = 0; j < 8; ++j) {
      CHECK(t.train.image(w)[j] == static_cast<float>(train[at + j]));
      CHECK(t.train.label(w)[j] == train[at + j + 1]);
    }
  }
  for (std::int64_t w = 0; w < t.test.size(); ++w)
    for (std::size_t j = 0; j < 8; ++j)
      CHECK(t.test.label(w)[j] == val[static_cast<std::size_t>(w) * 8 + j + 1]);
  // The same seed draws the same windows; another seed others.
  CHECK(load_tokens(d.path.string(), 8, 1000, 0.1, 5).train.offsets == t.train.offsets);
  CHECK(load_tokens(d.path.string(), 8, 1000, 0.1, 6).train.offsets != t.train.offsets);
}

TEST_CASE("Token files: one .bin of a text's bytes gives the text's windows, bit for bit") {
  temp_dir d;
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "line " + std::to_string(i * 37 % 101) + " of the corpus\n";
  std::ofstream(d / "corpus.txt", std::ios::binary) << text;
  write_ids(d / "corpus.bin", std::vector<std::uint16_t>(text.begin(), text.end()));
  const auto a = load_text(d / "corpus.txt", 16, 0.1, 3);
  const auto b = load_tokens(d / "corpus.bin", 16, 256, 0.1, 3);
  CHECK(b.one_file);
  CHECK(b.train_tokens + b.val_tokens == static_cast<std::int64_t>(text.size()));
  for (auto [x, y] : {std::pair{&a.train, &b.train}, std::pair{&a.test, &b.test}}) {
    CHECK(x->images == y->images);
    CHECK(x->labels == y->labels);
    CHECK(x->offsets == y->offsets);
  }
}

TEST_CASE("Token files: a bad id, an odd size, a missing val.bin, too few ids are clear errors") {
  temp_dir d;
  write_ids(d / "ids.bin", {1, 2, 3, 700, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK_THROWS_WITH(load_tokens(d / "ids.bin", 2, 512, 0.5, 1),
                    Catch::Contains("token 700 at position 3 (byte 6) is not below model.vocab = 512"));
  std::ofstream(d / "odd.bin", std::ios::binary) << "abc";
  CHECK_THROWS_WITH(load_tokens(d / "odd.bin", 2, 512, 0.5, 1), Catch::Contains("is 3 bytes, not a whole number"));
  fs::create_directories(d.path / "folder");
  write_ids(d / "folder/train.bin", std::vector<std::uint16_t>(100, 1));
  CHECK_THROWS_WITH(load_tokens(d / "folder", 4, 512, 0.1, 1), Catch::Contains("a folder without val.bin"));
  write_ids(d / "folder/val.bin", {1, 2, 3});
  CHECK_THROWS_WITH(load_tokens(d / "folder", 4, 512, 0.1, 1),
                    Catch::Contains("holds 3 token ids, fewer than one window of model.context + 1 = 5"));
  CHECK_THROWS_WITH(load_tokens(d / "none.bin", 4, 512, 0.1, 1), Catch::Contains("none.bin"));
  CHECK_THROWS_WITH(load_tokens(d / "ids.bin", 2, 70000, 0.5, 1), Catch::Contains("must be in 1..65536"));
}
