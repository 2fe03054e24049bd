#include "kernels/error.hpp"
#include "models/data_file.hpp"
#include "models/dataset.hpp"
#include "models/token_windows.hpp"

#include <filesystem>

namespace gradwire::models {

namespace {

/// The ids of a .bin file: little-endian uint16 each, every one below `vocab`.
std::vector<std::uint16_t> read_ids(const std::string& file, int vocab) {
  const auto bytes = read_data_file(file, "data.path");
  check(bytes.size() % 2 == 0, "data.path: " + file + " is " + std::to_string(bytes.size()) +
                                   " bytes, not a whole number of token ids (a .bin holds little-endian uint16 ids)");
  std::vector<std::uint16_t> ids(bytes.size() / 2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto id = static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[2 * i]) |
                                               static_cast<unsigned char>(bytes[2 * i + 1]) << 8);
    check(id < vocab, "data.path: " + file + ": token " + std::to_string(id) + " at position " + std::to_string(i) +
                          " (byte " + std::to_string(2 * i) + ") is not below model.vocab = " + std::to_string(vocab) +
                          " (set model.vocab to the tokenizer's vocabulary size)");
    ids[i] = id;
  }
  return ids;
}

void check_holds_window(const std::string& what, std::size_t n, int context) {
  const auto window = static_cast<std::size_t>(context) + 1;
  check(n >= window, "data.path: " + what + " holds " + std::to_string(n) + " token ids, fewer than one window of " +
                         "model.context + 1 = " + std::to_string(window));
}

} // namespace

token_splits load_tokens(const std::string& path, int context, int vocab, double val_fraction, std::uint64_t seed) {
  namespace fs = std::filesystem;
  check(context > 0, "token data: model.context must be positive");
  check(vocab > 0 && vocab <= 65536, "token data: model.vocab = " + std::to_string(vocab) +
                                         " must be in 1..65536 (a .bin holds uint16 ids)");
  const auto why = not_a_data_file(path, true);
  check(why.empty(), "data.path = \"" + path + "\" " + why);
  token_splits out;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    check(val_fraction > 0 && val_fraction < 1, "data.val_fraction must be in (0, 1)");
    const auto ids = read_ids(path, vocab);
    const auto val = static_cast<std::size_t>(static_cast<double>(ids.size()) * val_fraction);
    const auto train = ids.size() - val;
    check_holds_window(path + "'s training part (data.val_fraction = " + std::to_string(val_fraction) + ")", train,
                       context);
    check_holds_window(path + "'s validation part (data.val_fraction = " + std::to_string(val_fraction) + ")", val,
                       context);
    out.train = windows::training("tokens", ids, train, context, vocab, seed);
    out.test = windows::validation("tokens", ids, train, val, context, vocab);
    out.train_tokens = static_cast<std::int64_t>(train), out.val_tokens = static_cast<std::int64_t>(val);
    out.one_file = true;
    return out;
  }
  const auto train_file = (fs::path(path) / "train.bin").string(), val_file = (fs::path(path) / "val.bin").string();
  for (const auto& f : {train_file, val_file})
    check(fs::exists(f, ec), "data.path = \"" + path + "\" is a folder without " + fs::path(f).filename().string() +
                                 " (a folder of token files holds train.bin and val.bin, as nanoGPT's prepare.py "
                                 "writes them; or give one .bin file)");
  const auto train = read_ids(train_file, vocab), val = read_ids(val_file, vocab);
  check_holds_window(train_file, train.size(), context);
  check_holds_window(val_file, val.size(), context);
  out.train = windows::training("tokens", train, train.size(), context, vocab, seed);
  out.test = windows::validation("tokens", val, 0, val.size(), context, vocab);
  out.train_tokens = static_cast<std::int64_t>(train.size()), out.val_tokens = static_cast<std::int64_t>(val.size());
  return out;
}

} // namespace gradwire::models
