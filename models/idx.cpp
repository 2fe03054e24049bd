// IDX reader (MNIST, Fashion-MNIST). zlib's gzread reads gzipped and plain
// files alike, so one path serves both.
#include "models/data_file.hpp"
#include "models/dataset.hpp"

#include "kernels/error.hpp"

#include <zlib.h>

#include <filesystem>
#include <memory>

namespace gradwire::models {
namespace {

struct gz_closer {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using gz_ptr = std::unique_ptr<gzFile_s, gz_closer>;

gz_ptr open_gz(const std::string& path) {
  const auto why = not_a_data_file(path);
  check(why.empty(), why == "does not exist" ? "dataset file not found: " + path : "dataset file " + path + " " + why);
  gz_ptr f(gzopen(path.c_str(), "rb"));
  check(f != nullptr, "cannot open dataset file " + path);
  return f;
}

/// Reads exactly `bytes` or throws naming the file and how much was there.
void read_exact(gzFile_s* f, const std::string& path, void* out, std::size_t bytes,
                const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t got = 0;
  while (got < bytes) {
    const auto chunk = static_cast<unsigned>(std::min<std::size_t>(bytes - got, 1u << 30));
    int n = gzread(f, p + got, chunk);
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw error(path + ": corrupt or unreadable (" + (msg ? msg : "zlib error") + ") while reading " + what);
    }
    if (n == 0)
      throw error(path + ": truncated: expected " + std::to_string(bytes) + " bytes of " + what +
                  ", found " + std::to_string(got));
    got += static_cast<std::size_t>(n);
  }
}

std::uint32_t read_be32(gzFile_s* f, const std::string& path, const char* what) {
  unsigned char b[4];
  read_exact(f, path, b, 4, what);
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

} // namespace

namespace {

/// An IDX image file's header, checked: the count and each image's size.
struct idx_images {
  std::uint32_t n = 0, rows = 0, cols = 0;
  std::uint64_t total = 0; ///< bytes of image data the header declares
};

idx_images read_image_header(gzFile f, const std::string& path) {
  const auto magic = read_be32(f, path, "the IDX header");
  check(magic == 0x00000803, path + ": not an IDX image file (magic " + hex(magic) + ", expected 0x00000803)");
  idx_images h;
  h.n = read_be32(f, path, "the IDX header");
  h.rows = read_be32(f, path, "the IDX header");
  h.cols = read_be32(f, path, "the IDX header");
  check(h.rows > 0 && h.cols > 0 && h.rows <= 4096 && h.cols <= 4096 && h.n <= (1u << 26),
        path + ": implausible IDX dimensions " + std::to_string(h.n) + " x " + std::to_string(h.rows) + " x " +
          std::to_string(h.cols));
  h.total = std::uint64_t{h.n} * h.rows * h.cols;
  constexpr std::uint64_t max_total = std::uint64_t{1} << 33;
  check(h.total <= max_total, path + ": the IDX header declares " + std::to_string(h.n) + " images of " +
                                std::to_string(h.rows) + " x " + std::to_string(h.cols) + " (" +
                                std::to_string(h.total) + " bytes), more than " + std::to_string(max_total) + " bytes");
  return h;
}

/// `wanted` bytes of image data, read as the data arrives, not allocated
/// from the header's word: a header that claims more than the file holds
/// is "truncated", not an allocation of what it claims.
std::vector<unsigned char> read_pixels(gzFile f, const std::string& path, std::uint64_t wanted, std::uint64_t total) {
  std::vector<unsigned char> pix;
  constexpr std::size_t step = std::size_t{64} << 20;
  for (std::uint64_t at = 0; at < wanted;) {
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(wanted - at, step));
    pix.resize(static_cast<std::size_t>(at) + chunk);
    try {
      read_exact(f, path, pix.data() + at, chunk, "image data");
    } catch (const error&) {
      throw error(path + ": truncated: the IDX header declares " + std::to_string(total) +
                  " bytes of image data, the file holds fewer (" + std::to_string(at) + " read in whole chunks)");
    }
    at += chunk;
  }
  return pix;
}

/// The first `keep` labels of an IDX label file that must hold `n`.
std::vector<unsigned char> read_labels(const std::string& path, std::uint32_t n, std::uint64_t keep,
                                       const std::string& images_path) {
  auto f = open_gz(path);
  const auto magic = read_be32(f.get(), path, "the IDX header");
  check(magic == 0x00000801, path + ": not an IDX label file (magic " + hex(magic) + ", expected 0x00000801)");
  const auto nl = read_be32(f.get(), path, "the IDX header");
  check(nl == n, path + ": " + std::to_string(nl) + " labels for " + std::to_string(n) + " images in " + images_path);
  std::vector<unsigned char> lab(static_cast<std::size_t>(keep));
  read_exact(f.get(), path, lab.data(), lab.size(), "label data");
  return lab;
}

} // namespace

dataset load_idx(const std::string& images_path, const std::string& labels_path, int classes, std::int64_t limit) {
  dataset d;
  d.classes = classes;
  d.channels = 1;
  auto fi = open_gz(images_path);
  const auto h = read_image_header(fi.get(), images_path);
  d.height = static_cast<int>(h.rows);
  d.width = static_cast<int>(h.cols);
  const std::uint64_t keep = limit > 0 ? std::min<std::uint64_t>(h.n, static_cast<std::uint64_t>(limit)) : h.n;
  const auto pix = read_pixels(fi.get(), images_path, keep * h.rows * h.cols, h.total);
  const auto lab = read_labels(labels_path, h.n, keep, images_path);
  d.images.resize(pix.size());
  for (std::size_t i = 0; i < pix.size(); ++i)
    d.images[i] = static_cast<float>(pix[i]) * (1.f / 255.f);
  d.labels.resize(lab.size());
  for (std::size_t i = 0; i < lab.size(); ++i) {
    check(lab[i] < classes, labels_path + ": label " + std::to_string(lab[i]) + " at index " +
                              std::to_string(i) + " is not below " + std::to_string(classes));
    d.labels[i] = lab[i];
  }
  return d;
}

dataset load_mnist_dir(const std::string& dir, bool train, const std::string& name, std::int64_t limit) {
  const std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    for (const char* ext : {".gz", ""}) {
      auto p = std::filesystem::path(dir) / (stem + ext);
      if (std::filesystem::exists(p))
        return p.string();
    }
    std::string hint = name == "fashion-mnist"
                         ? " (install the Debian package dataset-fashion-mnist, or set data.path)"
                         : " (set data.path to a folder with the IDX files)";
    throw error("dataset " + name + ": " + stem + "[.gz] not found in " + dir + hint);
  };
  const auto images = find(prefix + "-images-idx3-ubyte"); // images first, for the message
  const auto labels = find(prefix + "-labels-idx1-ubyte");
  auto d = load_idx(images, labels, 10, limit);
  d.name = name;
  return d;
}

void dataset::keep_first(std::int64_t n) {
  if (n <= 0 || n >= size())
    return;
  labels.resize(static_cast<std::size_t>(n * label_width));
  images.resize(static_cast<std::size_t>(n * sample_numel()));
  if (!offsets.empty())
    offsets.resize(static_cast<std::size_t>(n));
}

dataset dataset::head(std::int64_t n) const {
  if (n <= 0 || n >= size())
    return *this;
  dataset d = *this;
  d.labels.resize(static_cast<std::size_t>(n * label_width));
  d.images.resize(static_cast<std::size_t>(n * sample_numel()));
  if (!d.offsets.empty())
    d.offsets.resize(static_cast<std::size_t>(n));
  return d;
}

} // namespace gradwire::models
