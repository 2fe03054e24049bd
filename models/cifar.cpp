// CIFAR-10 binary format: records of 1 label byte followed by 3072 bytes
// (1024 red, 1024 green, 1024 blue, each row-major 32x32): already CHW.
#include "models/data_file.hpp"
#include "models/dataset.hpp"

#include "kernels/error.hpp"

#include <filesystem>
#include <fstream>

namespace gradwire::models {

dataset load_cifar10_files(const std::vector<std::string>& paths, std::int64_t limit) {
  constexpr std::size_t pixels = 3 * 32 * 32, record = pixels + 1;
  dataset d;
  d.name = "cifar10";
  d.channels = 3;
  d.height = d.width = 32;
  d.classes = 10;
  // Every file's size is checked first, and the records kept are allocated
  // once: growing by push_back copied the 614 MB training set as it grew.
  std::vector<std::size_t> records; // by file
  std::size_t total = 0;
  for (const auto& path : paths) {
    const auto why = not_a_data_file(path);
    check(why.empty(), why == "does not exist" ? "CIFAR-10 file not found: " + path : "CIFAR-10 file " + path + " " + why);
    const auto bytes = std::filesystem::file_size(path);
    check(bytes > 0 && bytes % record == 0,
          path + ": not a CIFAR-10 binary file: " + std::to_string(bytes) +
            " bytes is not a whole number of 3073-byte records (truncated?)");
    records.push_back(static_cast<std::size_t>(bytes / record));
    total += records.back();
  }
  const std::size_t keep = limit > 0 ? std::min(total, static_cast<std::size_t>(limit)) : total;
  d.labels.resize(keep);
  d.images.resize(keep * pixels);
  std::size_t at = 0;
  for (std::size_t f = 0; f < paths.size() && at < keep; ++f) {
    const auto& path = paths[f];
    const std::size_t n = std::min(records[f], keep - at);
    std::ifstream in(path, std::ios::binary);
    check(in.good(), "cannot open " + path);
    std::vector<unsigned char> buf(n * record);
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    check(static_cast<std::size_t>(in.gcount()) == buf.size(), path + ": short read");
    for (std::size_t i = 0; i < n; ++i, ++at) {
      const unsigned char* r = buf.data() + i * record;
      check(r[0] < 10, path + ": label " + std::to_string(r[0]) + " in record " +
                         std::to_string(i) + " is not a CIFAR-10 class (0-9)");
      d.labels[at] = r[0];
      float* out = d.images.data() + at * pixels;
      for (std::size_t j = 0; j < pixels; ++j)
        out[j] = static_cast<float>(r[j + 1]) * (1.f / 255.f);
    }
  }
  return d;
}

dataset load_cifar10_dir(const std::string& dir, bool train, std::int64_t limit) {
  std::vector<std::string> paths;
  if (train)
    for (int i = 1; i <= 5; ++i)
      paths.push_back((std::filesystem::path(dir) / ("data_batch_" + std::to_string(i) + ".bin")).string());
  else
    paths.push_back((std::filesystem::path(dir) / "test_batch.bin").string());
  for (const auto& p : paths)
    check(std::filesystem::exists(p),
          "dataset cifar10: " + p + " not found (download the CIFAR-10 binary version and set "
          "data.path to its folder, or use data.dataset = \"synthetic-cifar\")");
  return load_cifar10_files(paths, limit);
}

} // namespace gradwire::models
