// A whole run through the scheduler: the results folder is complete and
// consistent, interrupts keep what was written, bad data is a clear error.
#include "kernels/error.hpp"
#include "models/model.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/data_source.hpp"
#include "scheduler/app/evaluator.hpp"
#include "scheduler/app/model_file.hpp"
#include "scheduler/app/topology_run.hpp"
#include "scheduler/app/results.hpp"
#include "scheduler/app/single_run.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>
#include <unistd.h>

using namespace gradwire;
using namespace gradwire::scheduler;
namespace fs = std::filesystem;

namespace {

using gwtest::fresh_dir;

/// Options for a run in a test: no progress line.
run_options quiet() {
  run_options o;
  o.progress = false;
  return o;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    out.push_back(nlohmann::json::parse(line));
  return out;
}

} // namespace

TEST_CASE("a synthetic run writes summary.json, metrics.jsonl and config.toml") {
  const auto out = fresh_dir("synthetic");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_train = 2000\nsynthetic_test = 500\n"
                          "[train]\nepochs = 2\nlog_every = 10\nthreads = 2\ntarget_accuracy = 0.5\n",
                          "t.toml", {"experiment.out=" + out});
  auto o = quiet();
  auto s = run_single(cfg, o);
  CHECK(s["status"] == "completed");
  CHECK(s["steps"] == 2 * 32); // 2000 / 64 rounded up, twice
  CHECK(s["samples"] == 4000);
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
  CHECK(s["time_to_target"].is_number());
  CHECK(s["staleness"]["count"] == s["steps"]);
  CHECK(s["staleness"]["max"] == 0);
  CHECK(s["samples_per_sec"].get<double>() > 0);
  auto on_disk = nlohmann::json::parse(std::ifstream(out + "/summary.json"));
  CHECK(on_disk["steps"] == s["steps"]);
  auto recs = read_jsonl(out + "/metrics.jsonl");
  int steps = 0, evals = 0;
  for (const auto& r : recs) {
    if (r["type"] == "step") {
      ++steps;
      for (const char* k : {"time", "step", "loss", "samples", "compute_ms", "comm_ms", "wait_ms", "staleness"})
        CHECK(r.contains(k));
    } else {
      CHECK(r["type"] == "eval");
      ++evals;
    }
  }
  CHECK(steps >= 6);
  CHECK(evals == 2);
  // metrics.csv: the same records, one row each, the record's type first.
  std::ifstream csv(out + "/metrics.csv");
  std::string header, row;
  REQUIRE(std::getline(csv, header));
  CHECK(header.rfind("type,time,worker,epoch,step,samples,loss,", 0) == 0);
  std::size_t rows = 0, eval_rows = 0;
  while (std::getline(csv, row)) {
    ++rows;
    eval_rows += row.rfind("\"eval\",", 0) == 0;
  }
  CHECK(rows == recs.size());
  CHECK(eval_rows == 2);
  CHECK(fs::exists(out + "/config.toml"));
  CHECK_NOTHROW(load_config(out + "/config.toml"));
  fs::remove_all(out);
}

TEST_CASE("a stop request ends the run early with status interrupted and all files written") {
  const auto out = fresh_dir("stop");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\n[train]\nepochs = 50\n", "t.toml",
                          {"experiment.out=" + out});
  std::atomic<bool> stop{true};
  auto o = quiet();
  o.stop = &stop;
  auto s = run_single(cfg, o);
  CHECK(s["status"] == "interrupted");
  CHECK(fs::exists(out + "/summary.json"));
  CHECK(fs::exists(out + "/metrics.jsonl"));
  fs::remove_all(out);
}

TEST_CASE("max_steps bounds the run") {
  const auto out = fresh_dir("max");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\n[train]\nmax_steps = 7\nlog_every = 3\n",
                          "t.toml", {"experiment.out=" + out});
  auto o = quiet();
  auto s = run_single(cfg, o);
  CHECK(s["steps"] == 7);
  CHECK(s["final_test_accuracy"].is_number());
  fs::remove_all(out);
}

TEST_CASE("a missing dataset folder is a clear error") {
  auto cfg = parse_config("[data]\npath = \"/nonexistent/fmnist\"\n", "t.toml");
  CHECK_THROWS_WITH(run_single(cfg, {}), Catch::Contains("/nonexistent/fmnist") &&
                                           Catch::Contains("dataset-fashion-mnist"));
  auto cifar = parse_config("[data]\ndataset = \"cifar10\"\n", "c.toml");
  CHECK_THROWS_WITH(run_single(cifar, {}), Catch::Contains("data.path"));
}

TEST_CASE("a parameter-server run writes the results folder with staleness statistics") {
  for (const char* mode : {"sync", "async", "ssp"}) {
    INFO(mode);
    const auto out = fresh_dir(std::string("ps-") + mode);
    auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_train = 2048\nsynthetic_test = 500\n"
                            "[topology]\nkind = \"parameter-server\"\nworkers = 3\n[topology.ps]\nshards = 2\n"
                            "[train]\nepochs = 2\nbatch_size = 32\nmomentum = 0.0\nlog_every = 10\n",
                            "t.toml", {"experiment.out=" + out, std::string("topology.ps.mode=") + mode});
    auto o = quiet();
    auto s = run_actors(cfg, o);
    CHECK(s["topology"] == "parameter-server");
    CHECK(s["workers"] == 3);
    CHECK(s["steps_per_worker"] == 2 * (2048 / 3 / 32));
    CHECK(s["samples"] == 3 * 2 * (2048 / 3 / 32) * 32);
    CHECK(s["final_test_accuracy"].get<double>() > 0.5);
    CHECK(s["staleness"]["count"] == 3 * 2 * s["steps_per_worker"].get<std::int64_t>());
    if (std::string(mode) == "sync")
      CHECK(s["staleness"]["max"] == 0);
    if (std::string(mode) == "ssp")
      CHECK(s["max_clock_gap"].get<std::int64_t>() <= 2 + 1); // default staleness_bound = 2
    CHECK(s["per_worker"].size() == 3);
    CHECK(fs::exists(out + "/summary.json"));
    int workers = 0;
    std::map<int, std::int64_t> last_step;
    std::map<int, int> records;
    for (const auto& r : read_jsonl(out + "/metrics.jsonl")) {
      workers += r["type"] == "worker";
      if (r["type"] == "step") {
        for (const char* k : {"time", "step", "loss", "samples", "compute_ms", "comm_ms", "wait_ms", "staleness"})
          CHECK(r.contains(k));
        const int w = r["worker"].get<int>();
        CHECK(r["step"].get<std::int64_t>() > last_step[w]); // in order per worker
        last_step[w] = r["step"].get<std::int64_t>();
        ++records[w];
      }
    }
    CHECK(workers == 3);
    REQUIRE(last_step.size() == 3);
    for (const auto& [w, step] : last_step) {
      CHECK(step == s["steps_per_worker"].get<std::int64_t>());
      CHECK(records[w] == (s["steps_per_worker"].get<int>() + 9) / 10); // log_every = 10
    }
    fs::remove_all(out);
  }
}

TEST_CASE("a stop request ends a parameter-server run with status interrupted and all files written") {
  const auto out = fresh_dir("ps-stop");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\n[topology]\nkind = \"parameter-server\"\n"
                          "[train]\nepochs = 50\n", "t.toml", {"experiment.out=" + out});
  std::atomic<bool> stop{true};
  auto o = quiet();
  o.stop = &stop;
  auto s = run_actors(cfg, o);
  CHECK(s["status"] == "interrupted");
  // A stop skips the final evaluation, as a single run's does: none was made during the run.
  CHECK(s["final_test_accuracy"].is_null());
  CHECK(s["final_test_loss"].is_null());
  CHECK(fs::exists(out + "/summary.json"));
  CHECK(fs::exists(out + "/metrics.jsonl"));
  CHECK(fs::exists(out + "/model.safetensors"));
  for (const auto& r : read_jsonl(out + "/metrics.jsonl"))
    CHECK(r["type"] != "eval");
  fs::remove_all(out);
}

TEST_CASE("a stop drops the snapshots not yet evaluated, and keeps the latest evaluation made") {
  const auto out = fresh_dir("eval-stop");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_test = 500\n", "t.toml",
                          {"experiment.out=" + out});
  const auto data = load_data(cfg);
  for (const bool during : {false, true}) {
    INFO("during the run: " << during);
    std::size_t records = 0, dropped = 0;
    {
      results_writer w(out);
      progress_line quiet_line(false);
      evaluator ev(cfg, data.test, w, quiet_line, 10, during);
      CHECK_FALSE(ev.latest().has_value());
      if (!during)
        ev.record(3, 1.0, {0.5, 0.25, 500});
      for (std::int64_t step = 10; step <= 40; step += 10)
        ev.submit(step, 2.0, ev.model.params(), {});
      dropped = ev.abandon();
      if (!during) {
        CHECK(dropped == 4); // "after": none was evaluated
        REQUIRE(ev.latest().has_value());
        CHECK(ev.latest()->accuracy == 0.25);
      }
      ev.drain(); // nothing is left to evaluate after abandon()
    }
    for (const auto& r : read_jsonl(out + "/metrics.jsonl"))
      records += r["type"] == "eval" && r["step"] != 3 ? 1 : 0;
    CHECK(records + dropped == 4); // each snapshot either evaluated or dropped, never both
    if (!during)
      CHECK(records == 0);
    fs::remove(out + "/metrics.jsonl");
  }
  fs::remove_all(out);
}

TEST_CASE("a local-SGD run writes the results folder") {
  const auto out = fresh_dir("local-sgd");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_train = 2048\nsynthetic_test = 500\n"
                          "[topology]\nkind = \"local-sgd\"\nworkers = 2\nlocal_steps = 4\n"
                          "[train]\nepochs = 1\nbatch_size = 32\n",
                          "t.toml", {"experiment.out=" + out});
  auto o = quiet();
  auto s = run_actors(cfg, o);
  CHECK(s["topology"] == "local-sgd");
  CHECK(s["local_steps"] == 4);
  CHECK(s["steps_per_worker"] == 2048 / 2 / 32);
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
  fs::remove_all(out);
}

TEST_CASE("staleness summary: mean, quantiles and max from a histogram") {
  CHECK(histogram_of({0, 2, 2, -1, 4}) == std::vector<std::int64_t>{2, 0, 2, 0, 1});
  auto s = staleness_summary({10, 0, 5, 0, 1});
  CHECK(s["count"] == 16);
  CHECK(s["mean"].get<double>() == Approx((0 * 10 + 2 * 5 + 4 * 1) / 16.0));
  CHECK(s["p50"] == 0);
  CHECK(s["p99"] == 4);
  CHECK(s["max"] == 4);
}

TEST_CASE("train.eval_steps evaluates snapshots, during or after the run, in one worker and in a topology, and finds time_to_target") {
  struct variant {
    const char* kind;
    const char* eval; // train.eval of a topology: the snapshots evaluated during the run or after it
  };
  for (const auto& v : {variant{"single", "auto"}, variant{"ring", "during"}, variant{"ring", "after"},
                        variant{"parameter-server", "during"}, variant{"parameter-server", "after"}}) {
    const char* kind = v.kind;
    INFO(kind << ", eval " << v.eval);
    const auto out = fresh_dir(std::string("evals-") + kind + "-" + v.eval);
    auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_train = 2048\nsynthetic_test = 300\n"
                            "[train]\nepochs = 2\nbatch_size = 32\neval_steps = 10\ntarget_accuracy = 0.3\n",
                            "t.toml",
                            {"experiment.out=" + out, std::string("topology.kind=\"") + kind + "\"",
                             std::string("train.eval=\"") + v.eval + "\""});
    auto o = quiet();
    auto s = std::string(kind) == "single" ? run_single(cfg, o) : run_actors(cfg, o);
    const auto steps = std::string(kind) == "single" ? s["steps"].get<std::int64_t>() : s["steps_per_worker"].get<std::int64_t>();
    std::vector<std::int64_t> eval_steps;
    double last_time = -1;
    for (const auto& r : read_jsonl(out + "/metrics.jsonl"))
      if (r["type"] == "eval") {
        eval_steps.push_back(r["step"].get<std::int64_t>());
        CHECK(r["time"].get<double>() >= last_time);
        last_time = r["time"].get<double>();
        CHECK(r["test_accuracy"].get<double>() >= 0.0);
      }
    // Every 10 steps (epoch ends too in one worker), and the final one.
    REQUIRE(eval_steps.size() >= static_cast<std::size_t>(steps / 10));
    CHECK(eval_steps.front() == 10);
    CHECK(eval_steps.back() == steps);
    CHECK(std::is_sorted(eval_steps.begin(), eval_steps.end()));
    CHECK(s["time_to_target"].is_number()); // synthetic data passes 30% quickly
    CHECK(s["time_to_target"].get<double>() <= last_time + 1e-9);
    if (std::string(kind) != "single") {
      CHECK(s["eval"] == v.eval);
      // Recorded at the snapshot's time: each before the run's end.
      CHECK(s["time_to_target"].get<double>() <= s["train_seconds"].get<double>() + 1.0);
    }
    fs::remove_all(out);
  }
}

TEST_CASE("final_loss is the mean training loss over the last epoch's steps, not the last log window") {
  const auto out = fresh_dir("final_loss");
  auto cfg = parse_config("[data]\ndataset = \"synthetic\"\nsynthetic_train = 1000\nsynthetic_test = 200\n"
                          "[train]\nepochs = 3\nbatch_size = 50\nlog_every = 1\n",
                          "t.toml", {"experiment.out=" + out});
  auto o = quiet();
  auto s = run_single(cfg, o);
  std::vector<std::pair<double, double>> steps; // (loss, samples) per step
  double before = 0;
  for (const auto& r : read_jsonl(out + "/metrics.jsonl"))
    if (r["type"] == "step") {
      const double n = r["samples"].get<double>() - before;
      before = r["samples"].get<double>();
      steps.emplace_back(r["loss"].get<double>(), n);
    }
  REQUIRE(steps.size() == 60); // 20 steps an epoch, 3 epochs, one record each (log_every = 1)
  double sum = 0, n = 0;
  for (std::size_t k = steps.size() - 20; k < steps.size(); ++k) {
    sum += steps[k].first * steps[k].second;
    n += steps[k].second;
  }
  CHECK(s["final_loss_steps"] == 20);
  CHECK(s["final_loss"].get<double>() == Approx(sum / n).epsilon(1e-9));
  CHECK(s["final_loss"].get<double>() != Approx(steps.back().first).epsilon(1e-6)); // not the last window's
  fs::remove_all(out);
}

TEST_CASE("model.safetensors round-trips a ResNet's parameters and BatchNorm statistics, named after the layers") {
  models::model_spec spec;
  spec.kind = "resnet20";
  spec.channels = 3;
  spec.height = spec.width = 32;
  models::model a(spec, kernels::device::cpu(), 1), b(spec, kernels::device::cpu(), 2);
  for (std::int64_t i = 0; i < a.state().numel(); ++i) // statistics a run would have moved
    a.state().data()[i] = 0.5f + static_cast<float>(i % 7);
  const auto dir = fresh_dir("safetensors");
  fs::create_directories(dir);
  const auto path = dir + "/model.safetensors";
  std::ofstream(path, std::ios::binary) << safetensors_of(a, a.params().data(), a.state().data(), {{"k", "v"}});
  const auto md = read_model_metadata(path);
  CHECK(md.at("k") == "v");
  load_model_file(path, b);
  CHECK(std::equal(a.params().data(), a.params().data() + a.size(), b.params().data()));
  CHECK(std::equal(a.state().data(), a.state().data() + a.state().numel(), b.state().data()));
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"0.conv2d.weight\"") != std::string::npos);
  CHECK(text.find("batchnorm2d.running_var\"") != std::string::npos);
  fs::remove_all(dir);
}
