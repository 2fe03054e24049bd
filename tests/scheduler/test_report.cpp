// gradwire report: report.html with tables and gnuplot plots for a run and
// for a sweep; without gnuplot the tables remain and the page says why.
#include "kernels/error.hpp"
#include "scheduler/app/compare.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/plot.hpp"
#include "scheduler/app/report.hpp"
#include "scheduler/app/report_plots.hpp"
#include "scheduler/app/sweep.hpp"
#include "scheduler/app/sweep_table.hpp"
#include "scheduler/app/topology_run.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace gradwire;
using namespace gradwire::scheduler;
namespace fs = std::filesystem;

namespace {

using gwtest::fresh_dir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1))
    ++n;
  return n;
}

const char* async_ps = "[data]\ndataset = \"synthetic\"\nsynthetic_train = 1024\nsynthetic_test = 200\n"
                       "[topology]\nkind = \"parameter-server\"\nworkers = 3\n[topology.ps]\nmode = \"async\"\n"
                       "[train]\nepochs = 1\nbatch_size = 16\neval_steps = 8\nlog_every = 4\n";

/// A fresh folder `name` with an async parameter-server run in it.
std::string async_ps_run(const std::string& name) {
  const auto dir = fresh_dir(name);
  auto cfg = parse_config(async_ps, "t.toml", {"experiment.out=" + dir});
  run_options o;
  o.progress = false;
  run_actors(cfg, o);
  return dir;
}

/// Runs a sweep of `toml` (written beside the fresh folder `name`) over
/// `axes`, quietly, into that folder; returns the folder.
std::string quiet_sweep(const std::string& name, const std::string& toml, const std::vector<sweep_axis>& axes,
                        std::vector<std::string>* failed = nullptr) {
  const auto dir = fresh_dir(name);
  const auto cfg_path = dir + ".toml";
  std::ofstream(cfg_path) << toml;
  run_options o;
  o.progress = false;
  const auto out = run_sweep(cfg_path, {}, axes, dir, o, 0, failed);
  fs::remove(cfg_path);
  CHECK(out == dir);
  return dir;
}

/// Sets or clears GRADWIRE_GNUPLOT for one scope.
struct gnuplot_env {
  explicit gnuplot_env(const char* value) {
    if (value)
      ::setenv("GRADWIRE_GNUPLOT", value, 1);
  }
  ~gnuplot_env() { ::unsetenv("GRADWIRE_GNUPLOT"); }
};

} // namespace

TEST_CASE("a run's report: summary and worker tables, and its plots when gnuplot is there") {
  const auto dir = async_ps_run("run");
  auto r = write_report(dir);
  CHECK(r.html == dir + "/report.html");
  const auto html = slurp(r.html);
  CHECK(html.rfind("<!doctype html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);
  CHECK(html.find("staleness p99") != std::string::npos);
  CHECK(count(html, "<tr>") >= 3 + 10); // per-worker rows and summary rows
  if (find_gnuplot().empty()) {
    WARN("gnuplot not installed: only the no-plot page is checked");
    CHECK(r.plots == 0);
    return;
  }
  // Loss and accuracy against time and steps, each worker's time split,
  // staleness overall, per worker and against time; loss against samples,
  // against the bytes worker 0 sent, and accuracy against epochs.
  CHECK(r.plots == 11);
  for (const char* f : {"loss_time", "loss_steps", "accuracy_time", "accuracy_steps", "loss_samples", "accuracy_epochs",
                        "loss_bytes", "time_split", "staleness", "staleness_per_worker", "staleness_time"}) {
    INFO(f);
    const auto svg = slurp(dir + "/plots/" + f + ".svg");
    CHECK(svg.find("<svg") != std::string::npos);
    CHECK(svg.find("<path") != std::string::npos); // something was drawn
  }
  CHECK(count(html, "data:image/svg+xml;base64,") == 11); // embedded: the page stands alone
  // Axes: the time split's bars stand on 0; the staleness histogram starts
  // at its bar for 0, not at a negative staleness.
  const auto gp = slurp(dir + "/plots/plot.gp");
  auto block_of = [&gp](const std::string& name) {
    const auto at = gp.find("/" + name + ".svg\"");
    const auto end = gp.find("unset output", at);
    return at == std::string::npos ? std::string() : gp.substr(at, end - at);
  };
  CHECK(block_of("time_split").find("set yrange [0:*]") != std::string::npos);
  CHECK(block_of("staleness").find("set xrange [-0.5:*]") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a lost worker is a row of the Faults table and a mark on the curves over time and steps and so is its return") {
  const auto dir = async_ps_run("faults");
  // The record a run that lost worker 2 writes (tests/transport/faults.sh
  // checks the runtime writes it).
  auto summary = nlohmann::json::parse(slurp(dir + "/summary.json"));
  summary["faults"] = nlohmann::json::array({{{"rank", 2}, {"kind", "lost"}, {"what", "no frame for 1.00 s"},
                                              {"detected_at", 0.25}, {"recovered_at", 0.26}, {"at_step", 7},
                                              {"steps_lost", 1}, {"workers_after", 2}, {"rejoined_at", 0.75},
                                              {"rejoined_step", 19}}});
  std::ofstream(dir + "/summary.json") << summary.dump();
  auto r = write_report(dir);
  const auto html = slurp(r.html);
  CHECK(html.find("<h2>Faults</h2>") != std::string::npos);
  CHECK(html.find("no frame for 1.00 s") != std::string::npos);
  CHECK(html.find("back at step") != std::string::npos);
  if (find_gnuplot().empty()) {
    WARN("gnuplot not installed: the marks are not checked");
    return;
  }
  const auto gp = slurp(dir + "/plots/plot.gp");
  auto block_of = [&gp](const std::string& name) {
    const auto at = gp.find("/" + name + ".svg\"");
    const auto end = gp.find("unset output", at);
    return at == std::string::npos ? std::string() : gp.substr(at, end - at);
  };
  for (const char* f : {"loss_time", "accuracy_time", "staleness_time"}) {
    INFO(f);
    CHECK(block_of(f).find("set arrow from 0.25, graph 0") != std::string::npos);
    CHECK(block_of(f).find("\"worker 2 lost\"") != std::string::npos);
    CHECK(block_of(f).find("set arrow from 0.75, graph 0") != std::string::npos); // and back
    CHECK(block_of(f).find("\"worker 2 back\"") != std::string::npos);
  }
  for (const char* f : {"loss_steps", "accuracy_steps"}) {
    INFO(f);
    CHECK(block_of(f).find("set arrow from 7, graph 0") != std::string::npos);
    CHECK(block_of(f).find("set arrow from 19, graph 0") != std::string::npos);
  }
  CHECK(block_of("loss_samples").find("set arrow") == std::string::npos); // not a time or step axis
  fs::remove_all(dir);
}

TEST_CASE("without gnuplot the report keeps its tables and says what to install") {
  const auto dir = fresh_dir("nognuplot");
  auto cfg = parse_config(async_ps, "t.toml", {"experiment.out=" + dir, "train.epochs=1"});
  run_options o;
  o.progress = false;
  run_actors(cfg, o);
  gnuplot_env env("/nonexistent/gnuplot");
  auto r = write_report(dir);
  CHECK(r.plots == 0);
  CHECK(r.problem.find("gnuplot-nox") != std::string::npos);
  const auto html = slurp(r.html);
  CHECK(html.find("id=\"no-plots\"") != std::string::npos);
  CHECK(html.find("apt-get install gnuplot-nox") != std::string::npos);
  CHECK(html.find("staleness p99") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a sweep's report: the comparison table, overlaid curves, speedup and efficiency against workers") {
  const auto dir =
    quiet_sweep("sweep",
                "[data]\ndataset = \"synthetic\"\nsynthetic_train = 1024\nsynthetic_test = 200\n"
                "[topology]\nkind = \"ring\"\n[train]\nepochs = 1\nbatch_size = 16\neval_steps = 8\n",
                {sweep_axis{"topology.workers", {"1", "2"}, {}}, sweep_axis{"experiment.seed", {"1", "2"}, {}}});
  auto r = write_report(dir);
  const auto html = slurp(r.html);
  CHECK(html.find("efficiency") != std::string::npos);
  CHECK(html.find("href=\"point-001/report.html\"") != std::string::npos); // each point has its own page
  CHECK(fs::exists(dir + "/point-000/report.html"));
  if (!find_gnuplot().empty()) {
    // Accuracy against time and steps, loss against time and against bytes
    // sent (a worker of one sends none), speedup, efficiency (a ring has no staleness).
    CHECK(r.plots == 6);
    CHECK(fs::exists(dir + "/plots/loss_bytes.svg"));
    CHECK(fs::exists(dir + "/plots/speedup.svg"));
    CHECK(fs::exists(dir + "/plots/efficiency.svg"));
    // One curve per point in the overlay: the mean of its seeds, with their
    // min-max band; the legend names the varied key, not the seed.
    const auto gp = slurp(dir + "/plots/plot.gp");
    CHECK(count(gp, "title \"topology.workers=1 (mean, band: min-max of 2 seeds)\"") == 3);
    CHECK(count(gp, "title \"topology.workers=2 (mean, band: min-max of 2 seeds)\"") == 4);
    CHECK(count(gp, "with filledcurves") == 7);
    CHECK(gp.find("experiment.seed") == std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("a sweep point that fails is a row marked unfinished: the points after it run and the table is written") {
  gnuplot_env none("/nonexistent/gnuplot");
  std::vector<std::string> failed;
  // CIFAR-10 without data.path passes the config's checks and fails when the run loads it.
  const auto dir = quiet_sweep("sweep-fail",
                               "[data]\nsynthetic_train = 512\nsynthetic_test = 100\n"
                               "[topology]\nkind = \"ring\"\nworkers = 2\n[train]\nmax_steps = 4\nbatch_size = 16\n",
                               {sweep_axis{"data.dataset", {"\"synthetic\"", "\"cifar10\"", "\"synthetic-cifar\""}, {}}},
                               &failed);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].find("point 2 (data.dataset=\"cifar10\"): ") == 0);
  CHECK(failed[0].find("needs data.path") != std::string::npos);
  std::ifstream in(dir + "/sweep.json");
  const auto sw = nlohmann::json::parse(in);
  REQUIRE(sw["rows"].size() == 3);
  CHECK(sw["rows"][0]["unfinished"] == 0);
  CHECK(sw["rows"][1]["unfinished"] == 1);
  CHECK(sw["rows"][2]["unfinished"] == 0); // the point after the failed one ran
  CHECK(sw["points"][1]["status"] == "failed");
  CHECK(slurp(dir + "/sweep.md").find("| **1 of 1** |") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("metrics.jsonl lines that are not records are skipped and named on the page: a bad line and a torn last one") {
  gnuplot_env none("/nonexistent/gnuplot"); // the tables are enough here
  const auto dir = async_ps_run("torn");
  auto text = slurp(dir + "/metrics.jsonl");
  REQUIRE(count(text, "\n") >= 3);
  const auto first = text.find('\n');
  // Line 2 becomes garbage; the last line loses its end (a run cut off mid-write).
  text.insert(first + 1, std::string("\x01 not json\n"));
  text.resize(text.size() - 10);
  std::ofstream(dir + "/metrics.jsonl", std::ios::trunc) << text;
  const auto lines = count(text, "\n") + 1;
  auto r = write_report(dir);
  const auto html = slurp(r.html);
  CHECK(html.find("metrics.jsonl: 2 line(s) skipped (line 2: not a JSON object; line " + std::to_string(lines) +
                  ": cut off (the last line, with no newline))") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a run killed before its summary still gets its curves from metrics.jsonl, and the page says it is unfinished") {
  const auto dir = async_ps_run("killed");
  fs::remove(dir + "/summary.json"); // as SIGKILL mid-run leaves the folder
  auto r = write_report(dir);
  const auto html = slurp(r.html);
  CHECK(html.find("unfinished: no summary.json") != std::string::npos);
  if (!find_gnuplot().empty())
    CHECK(r.plots >= 4); // loss and accuracy against time and steps, from the records
  fs::remove_all(dir);
}

TEST_CASE("a sweep table marks the rows whose runs did not finish: an interrupted last point is not a result") {
  const std::vector<sweep_axis> axes = {{"topology.workers", {"1", "2"}, {}}};
  auto summary = [](int workers, const char* status) {
    return nlohmann::json{{"workers", workers}, {"status", status}, {"samples_per_sec", 1000.0 * workers},
                          {"final_test_accuracy", 0.8}, {"final_loss", 0.5}};
  };
  const std::vector<sweep_point> done = {{{"1"}, summary(1, "completed")}, {{"2"}, summary(2, "interrupted")}};
  const auto t = make_sweep_table(done, axes);
  REQUIRE(t.rows.size() == 2);
  CHECK(t.rows[0]["unfinished"] == 0);
  CHECK(t.rows[1]["unfinished"] == 1);
  CHECK(t.md.find("| unfinished runs |") != std::string::npos);
  CHECK(t.md.find("| **1 of 1** |") != std::string::npos);
  CHECK(t.csv.find(",unfinished\n") != std::string::npos);
  CHECK(t.csv.substr(t.csv.size() - 3) == ",1\n");
}

TEST_CASE("a sweep table's CSV quotes a variant whose name holds a comma or a quote") {
  const std::vector<sweep_axis> axes = {{"variant", {"top-k 1%, no EF", "say \"hi\""}, {}}};
  auto summary = nlohmann::json{{"workers", 4}, {"samples_per_sec", 1000.0}, {"final_test_accuracy", 0.8},
                                {"final_loss", 0.5}};
  const std::vector<sweep_point> done = {{{"top-k 1%, no EF"}, summary}, {{"say \"hi\""}, summary}};
  const auto t = make_sweep_table(done, axes);
  CHECK(t.csv.find("\n\"top-k 1%, no EF\",1,") != std::string::npos);
  CHECK(t.csv.find("\n\"say \"\"hi\"\"\",1,") != std::string::npos);
  std::size_t lines = 0, fields = 0;
  for (char c : t.csv)
    lines += c == '\n';
  const auto header = t.csv.substr(0, t.csv.find('\n'));
  for (char c : header)
    fields += c == ',';
  CHECK(lines == 3);
  CHECK(fields == 16); // commas: the variant and 16 figures
}

TEST_CASE("a folder that is neither a run nor a sweep is a clear error") {
  const auto dir = fresh_dir("empty");
  fs::create_directories(dir);
  CHECK_THROWS_WITH(write_report(dir), Catch::Contains(dir) && Catch::Contains("neither summary.json"));
  std::ofstream(dir + "/summary.json") << "{ not json";
  CHECK_THROWS_WITH(write_report(dir), Catch::Contains("summary.json: not valid JSON"));
  // Valid JSON with a key of another type than gradwire writes: an error
  // naming the file, not json's own type error.
  for (const char* text : {R"({"name": 5})", R"({"name": "r", "status": ["done"]})"}) {
    std::ofstream(dir + "/summary.json", std::ios::trunc) << text;
    CHECK_THROWS_WITH(write_report(dir), Catch::Contains(dir + "/summary.json") && Catch::Contains("unexpected type"));
  }
  fs::remove_all(dir);
}

TEST_CASE("a language model's validation loss against bytes: worker 0's bytes at each evaluation's step") {
  using json = nlohmann::json;
  auto step = [](int worker, int s, double bytes) {
    return json{{"type", "step"}, {"worker", worker}, {"step", s}, {"bytes_sent", bytes}, {"loss", 3.0}};
  };
  auto eval = [](int s, double loss) { return json{{"type", "eval"}, {"step", s}, {"test_loss", loss}}; };
  // Worker 0 logs every 10 steps: 2 MB a step, then 1 MB a step after a
  // dense warm-up of 10; worker 1's records must not count.
  const std::vector<json> records = {step(1, 10, 999e6), step(0, 10, 20e6), eval(5, 4.0),  eval(10, 3.5),
                                     step(0, 20, 30e6),  eval(15, 3.2),     step(1, 20, 5e6), eval(30, 3.0)};
  const auto c = validation_loss_bytes(records, "x");
  CHECK(c.title == "x");
  REQUIRE(c.xy.size() == 4);
  CHECK(c.xy[0] == std::pair<double, double>{10.0, 4.0}); // halfway to the first record, from 0 at step 0
  CHECK(c.xy[1] == std::pair<double, double>{20.0, 3.5}); // at a record
  CHECK(c.xy[2] == std::pair<double, double>{25.0, 3.2}); // between two records
  CHECK(c.xy[3] == std::pair<double, double>{45.0, 3.0}); // past the last: 30 MB over 20 steps, at step 30
  // A worker 0 that sent nothing (one worker) has no curve.
  CHECK(validation_loss_bytes({step(0, 10, 0), eval(10, 3.5)}, "").xy.empty());
  CHECK(validation_loss_bytes({eval(10, 3.5)}, "").xy.empty());
}

TEST_CASE("a language-model sweep's report: validation loss against time and against bytes on a log scale") {
  const auto dir = quiet_sweep("sweep-lm",
                               "[model]\nkind = \"gpt\"\nlayers = 1\nheads = 2\nd_model = 16\ncontext = 16\n"
                               "[data]\ndataset = \"text\"\ntest_subset = 20\n"
                               "[topology]\nkind = \"ring\"\nworkers = 2\n"
                               "[train]\noptimizer = \"adamw\"\nbatch_size = 4\nmax_steps = 12\neval_steps = 4\n"
                               "log_every = 4\n",
                               {sweep_axis{"compression.kind", {"\"none\"", "\"topk\""}, {}}});
  // The compressed point's summary and step records give its compression
  // error, a share of what was compressed; the dense point's are null or absent.
  const auto dense = nlohmann::json::parse(slurp(dir + "/point-000/summary.json"));
  const auto topk = nlohmann::json::parse(slurp(dir + "/point-001/summary.json"));
  CHECK(dense["compress"].is_null());
  CHECK(dense["per_worker"][0]["compress_error"].is_null());
  const double err = topk["compress"]["error"].get<double>();
  CHECK(err > 0.0);
  CHECK(err < 1.0);
  for (const auto& w : topk["per_worker"])
    CHECK(w["compress_error"].get<double>() > 0.0);
  const auto steps_with_error = [&](const std::string& point) {
    int n = 0;
    std::istringstream in(slurp(dir + "/" + point + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto r = nlohmann::json::parse(line);
      n += r["type"] == "step" && r.contains("compress_error") ? 1 : 0;
    }
    return n;
  };
  CHECK(steps_with_error("point-000") == 0);
  CHECK(steps_with_error("point-001") == 6); // 2 workers, a record every 4 of 12 steps
  const auto rows = nlohmann::json::parse(slurp(dir + "/sweep.json"))["rows"];
  CHECK_FALSE(rows[0].contains("compress_error"));
  CHECK(rows[1]["compress_error"].get<double>() == Approx(err));
  // `gradwire compare` of the two points: the compressed one's error, n/a for the dense one.
  const auto cmp_dir = dir + "-compare"; // (a comparison never writes inside a sweep's folder)
  const auto cmp = write_comparison({dir + "/point-000", dir + "/point-001"}, cmp_dir);
  const auto page = slurp(cmp.html);
  const auto at_error = page.find("compression error");
  REQUIRE(at_error != std::string::npos);
  const auto error_row = page.substr(at_error, page.find("</tr>", at_error) - at_error);
  CHECK(error_row.find("n/a") != std::string::npos);
  CHECK(error_row.find(fmt::format("{:.4g}", err)) != std::string::npos);
  fs::remove_all(cmp_dir);
  auto r = write_report(dir);
  if (find_gnuplot().empty()) {
    fs::remove_all(dir);
    return;
  }
  CHECK(fs::exists(dir + "/plots/test_loss_time.svg"));
  CHECK(fs::exists(dir + "/plots/test_loss_bytes.svg"));
  const auto gp = slurp(dir + "/plots/plot.gp");
  const auto at = gp.find("/test_loss_bytes.svg\"");
  REQUIRE(at != std::string::npos);
  const auto block = gp.substr(at, gp.find("unset output", at) - at);
  CHECK(block.find("set logscale x") != std::string::npos);
  CHECK(count(block, " with linespoints") == 2); // a curve per point
  // The compressed point's own page plots its compression error per worker, in [0, 1].
  write_report(dir + "/point-001");
  CHECK(fs::exists(dir + "/point-001/plots/compress_error.svg"));
  const auto point_gp = slurp(dir + "/point-001/plots/plot.gp");
  const auto ce = point_gp.find("/compress_error.svg\"");
  REQUIRE(ce != std::string::npos);
  CHECK(point_gp.find("set yrange [0:1]", ce) < point_gp.find("unset output", ce));
  write_report(dir + "/point-000");
  CHECK_FALSE(fs::exists(dir + "/point-000/plots/compress_error.svg"));
  fs::remove_all(dir);
}
