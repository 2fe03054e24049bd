#include "scheduler/app/data_source.hpp"
#include "kernels/log.hpp"

#include "kernels/error.hpp"
#include "models/torch_layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gradwire::scheduler {

namespace {

/// Where the data's keys came from: "--set" when a --set gave one of them.
std::string data_origin(const run_config& cfg) {
  return cfg.overridden.count("data.path") || cfg.overridden.count("data.dataset") ? "--set" : cfg.source;
}

data_pair load_named(const run_config& cfg) {
  data_pair d;
  const auto& ds = cfg.dataset;
  if (ds == "fashion-mnist" || ds == "mnist") {
    std::string dir = cfg.data_path;
    if (dir.empty()) {
      check(ds == "fashion-mnist", cfg.origin("data.dataset") + " = \"mnist\" needs data.path (a folder with the "
                                   "MNIST IDX files)");
      dir = models::fashion_mnist_default_dir;
    }
    d.train = models::load_mnist_dir(dir, true, ds, cfg.train_subset); // (only what is used is read)
    d.test = models::load_mnist_dir(dir, false, ds, cfg.test_subset);
  } else if (ds == "cifar10") {
    check(!cfg.data_path.empty(), cfg.origin("data.dataset") + " = \"cifar10\" needs data.path (the folder with "
                                  "data_batch_1.bin ... test_batch.bin)");
    d.train = models::load_cifar10_dir(cfg.data_path, true, cfg.train_subset);
    d.test = models::load_cifar10_dir(cfg.data_path, false, cfg.test_subset);
  } else if (ds == "synthetic" || ds == "synthetic-cifar") {
    const bool cifar = ds == "synthetic-cifar";
    const int c = cifar ? 3 : 1, hw = cifar ? 32 : 28;
    d.train = models::make_synthetic(cfg.synthetic_train, c, hw, hw, 10, cfg.seed);
    d.test = models::make_synthetic(cfg.synthetic_test, c, hw, hw, 10, cfg.seed + 7919);
    d.train.name = d.test.name = ds;
  } else if (ds == "text") {
    const std::string path = cfg.data_path.empty() ? models::fortunes_default_dir : cfg.data_path;
    check(cfg.model.vocab >= 256, cfg.origin("model.vocab") + " = " + std::to_string(cfg.model.vocab) +
                                    " is too small for text, whose tokens are bytes (256)");
    auto t = models::load_text(path, cfg.model.context, cfg.val_fraction, cfg.seed);
    log::info("text: {} bytes from {} file(s) at {}: {} training windows, {} validation windows of {} bytes", t.bytes,
              t.files, path, t.train.size(), t.test.size(), cfg.model.context + 1);
    d.train = std::move(t.train);
    d.test = std::move(t.test);
  } else if (ds == "module") { // the torch module's own dataset(split, cfg)
    d.train = models::load_torch_dataset(cfg.model, "train");
    d.test = models::load_torch_dataset(cfg.model, "test");
    check(d.train.sample_numel() == d.test.sample_numel() && d.train.channels == d.test.channels,
          cfg.origin("data.dataset") + " = \"module\": dataset(\"train\", cfg) and dataset(\"test\", cfg) hold "
          "inputs of different shapes");
    d.train.classes = d.test.classes = std::max(d.train.classes, d.test.classes);
  } else if (ds == "tokens") {
    check(!cfg.data_path.empty(), cfg.origin("data.dataset") + " = \"tokens\" needs data.path: a .bin of uint16 "
                                  "token ids, or a folder with train.bin and val.bin (scripts/tokenize.py makes them)");
    auto t = models::load_tokens(cfg.data_path, cfg.model.context, cfg.model.vocab, cfg.val_fraction, cfg.seed);
    log::info("tokens: {} training and {} validation ids from {}{}: {} training windows, {} validation windows of {} "
              "ids, model.vocab = {}", t.train_tokens, t.val_tokens, cfg.data_path,
              t.one_file ? " (split by data.val_fraction)" : "", t.train.size(), t.test.size(), cfg.model.context + 1,
              cfg.model.vocab);
    d.train = std::move(t.train);
    d.test = std::move(t.test);
  } else {
    throw error(cfg.origin("data.dataset") + ": unknown dataset '" + ds + "'");
  }
  return d;
}

} // namespace

data_pair load_data(run_config& cfg) {
  data_pair d;
  try {
    d = load_named(cfg);
  } catch (const error& e) {
    if (cfg.if_missing != "synthetic" || cfg.dataset.rfind("synthetic", 0) == 0)
      throw;
    // data.if_missing = "synthetic": data of the same shape, said loudly.
    const bool cifar = cfg.dataset == "cifar10";
    log::warn("{}", e.what());
    log::warn("using synthetic {}-shaped data instead (data.if_missing = \"synthetic\")", cifar ? "CIFAR" : "MNIST");
    cfg.dataset = cifar ? "synthetic-cifar" : "synthetic";
    d = load_named(cfg);
  }
  const auto shape = [](const models::dataset& x) {
    return std::to_string(x.channels) + " x " + std::to_string(x.height) + " x " + std::to_string(x.width) + ", " +
           std::to_string(x.classes) + " classes";
  };
  check(d.train.channels == d.test.channels && d.train.height == d.test.height && d.train.width == d.test.width &&
          d.train.classes == d.test.classes,
        data_origin(cfg) + ": data.dataset = \"" + cfg.dataset + "\"" + (cfg.data_path.empty() ? "" : " at " + cfg.data_path) +
          ": the training images are " + shape(d.train) + ", the test images " + shape(d.test) +
          ": a model needs one shape");
  const auto where = data_origin(cfg) + ": data.dataset = \"" + cfg.dataset + "\"" +
                     (cfg.data_path.empty() ? "" : " at " + cfg.data_path);
  check(d.train.size() > 0, where + " has no training samples");
  // (Evaluated on nothing, a run would report 0% test accuracy as if measured.)
  check(d.test.size() > 0, where + " has no test samples");
  d.train.keep_first(cfg.train_subset); // in place: head() would copy 188 MB when keeping all
  d.test.keep_first(cfg.test_subset);
  if (cfg.normalize && d.train.offsets.empty() && cfg.dataset != "module") { // (a module's data is as it says) // (text windows, of any context, hold token ids, not pixels)
    // Standardise with the training set's statistics (torchvision's
    // Normalize): both splits, one mean and std over all pixels.
    double s = 0, ss = 0;
    for (float v : d.train.images) {
      s += v;
      ss += static_cast<double>(v) * v;
    }
    const double n = static_cast<double>(d.train.images.size());
    const double mean = s / n, sd = std::sqrt(std::max(ss / n - mean * mean, 1e-12));
    for (auto* split : {&d.train, &d.test})
      for (float& v : split->images)
        v = static_cast<float>((v - mean) / sd);
    d.input_mean = mean;
    d.input_std = sd;
  }
  cfg.model.channels = d.train.channels;
  cfg.model.height = d.train.height;
  cfg.model.width = d.train.width;
  cfg.model.classes = cfg.dataset == "text" || cfg.dataset == "tokens" ? cfg.model.vocab : d.train.classes;
  return d;
}

} // namespace gradwire::scheduler
