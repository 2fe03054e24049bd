#include "kernels/error.hpp"
#include "kernels/log.hpp"
#include "models/data_file.hpp"
#include "models/dataset.hpp"
#include "models/token_windows.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace gradwire::models {

namespace {

namespace fs = std::filesystem;

/// `s` without its lines that are only "%".
std::string drop_separators(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  std::size_t at = 0;
  while (at < s.size()) {
    std::size_t end = s.find('\n', at);
    end = end == std::string::npos ? s.size() : end + 1;
    const auto line = std::string_view(s).substr(at, end - at);
    if (line != "%\n" && line != "%")
      out.append(line);
    at = end;
  }
  return out;
}

/// The text of `path`: one file, or a folder's regular files in name order
/// (`binary`: how many it skipped for holding a NUL byte).
std::string read_corpus(const std::string& path, std::int64_t& files, std::int64_t& binary) {
  std::error_code ec;
  const fs::path root(path);
  const auto why = not_a_data_file(path, true);
  check(why.empty(), "data.path = \"" + path + "\" " + why);
  std::vector<fs::path> names;
  if (fs::is_directory(root, ec)) {
    for (const auto& e : fs::directory_iterator(root, ec))
      if (e.is_regular_file() && !e.is_symlink())
        names.push_back(e.path());
    check(!ec, "data.path = \"" + path + "\": cannot list the folder: " + ec.message());
    std::sort(names.begin(), names.end());
  } else {
    names.push_back(root);
  }
  std::string text;
  for (const auto& n : names) {
    auto s = read_data_file(n.string(), "data.path");
    if (s.find('\0') != std::string::npos) {
      log::debug("data.path: skipping {} (binary: it holds a NUL byte)", n.string());
      ++binary;
      continue;
    }
    text += drop_separators(s);
    ++files;
  }
  return text;
}

} // namespace

text_splits load_text(const std::string& path, int context, double val_fraction, std::uint64_t seed) {
  check(context > 0, "text data: model.context must be positive");
  check(val_fraction > 0 && val_fraction < 1, "data.val_fraction must be in (0, 1)");
  text_splits out;
  std::int64_t binary = 0;
  const std::string text = read_corpus(path, out.files, binary);
  out.bytes = static_cast<std::int64_t>(text.size());
  const auto window = static_cast<std::size_t>(context) + 1;
  const auto val_bytes = static_cast<std::size_t>(static_cast<double>(text.size()) * val_fraction);
  const std::size_t train_bytes = text.size() - val_bytes;
  const auto what = "data.path = \"" + path + "\" holds " + std::to_string(text.size()) + " bytes of text";
  check(!text.empty(), what + " (" + std::to_string(out.files) + " text files" +
                         (binary > 0 ? "; " + std::to_string(binary) + " skipped as binary: they hold NUL bytes" : std::string()) +
                         "): nothing to train on");
  check(train_bytes >= window && val_bytes >= window,
        what + ": with data.val_fraction = " + std::to_string(val_fraction) + ", the training (" +
          std::to_string(train_bytes) + ") and validation (" + std::to_string(val_bytes) +
          ") bytes must each hold one window of model.context + 1 = " + std::to_string(window) + " bytes");
  // Training: as many windows as the bytes hold end to end, at seeded offsets;
  // validation: consecutive windows over the last bytes.
  out.train = windows::training("text", text, train_bytes, context, 256, seed);
  out.test = windows::validation("text", text, train_bytes, val_bytes, context, 256);
  return out;
}

} // namespace gradwire::models
