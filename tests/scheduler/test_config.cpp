// Config parsing: defaults, overrides, and errors that say where and what.
#include "kernels/error.hpp"
#include "scheduler/app/config.hpp"
#include "scheduler/app/config_schema.hpp"

#include <toml++/toml.h>

#include <catch2/catch.hpp>

#include <filesystem>

using namespace gradwire;
using namespace gradwire::scheduler;

TEST_CASE("an empty config gives the documented defaults") {
  auto c = parse_config("", "empty.toml");
  CHECK(c.name == "default");
  CHECK(c.out == "results/default");
  CHECK(c.model.kind == "mlp");
  CHECK(c.model.hidden == std::vector<int>{256, 128});
  CHECK(c.dataset == "fashion-mnist");
  CHECK(c.epochs == 5);
  CHECK(c.batch_size == 64);
  CHECK(c.opt.kind == "sgd");
  CHECK(c.opt.lr == Approx(0.05));
  CHECK(c.opt.momentum == Approx(0.9));
  CHECK(c.threads == 1);
  CHECK(c.device == "cpu");
}

TEST_CASE("values from the file and from --set, later wins") {
  auto c = parse_config("[experiment]\nname = \"x\"\n[train]\nlr = 0.1\nepochs = 2\n[model]\nkind = \"lenet5\"\n",
                        "a.toml", {"train.epochs=3", "model.hidden=[64, 32, 16]", "model.kind=mlp",
                                   "train.device=cuda:1", "experiment.out=/tmp/x"});
  CHECK(c.name == "x");
  CHECK(c.opt.lr == Approx(0.1));
  CHECK(c.epochs == 3);
  CHECK(c.model.kind == "mlp");
  CHECK(c.model.hidden == std::vector<int>{64, 32, 16});
  CHECK(c.device == "cuda:1");
  CHECK(c.out == "/tmp/x");
  CHECK_THAT(c.resolved_toml, Catch::Contains("epochs = 3") && Catch::Contains("kind = 'mlp'"));
}

TEST_CASE("the resolved config parses back to the same settings") {
  auto c = parse_config("[train]\nlr = 0.2\n", "a.toml", {"train.threads=2"});
  auto again = parse_config(c.resolved_toml, "resolved.toml");
  CHECK(again.opt.lr == Approx(0.2));
  CHECK(again.threads == 2);
  CHECK(again.out == c.out);
  // A family's own table (HALoS's, DiLoCo's) reads back too, not its defaults.
  const auto fam = parse_config("[topology]\nkind = \"diloco\"\n[topology.diloco]\nouter_lr = 0.3\n"
                                "[topology.halos]\nlocal_lr = 0.5\n",
                                "h.toml");
  const auto fam_back = parse_config(fam.resolved_toml, "resolved.toml");
  CHECK(fam_back.ps.outer_lr == Approx(0.3));
  CHECK(fam_back.halos.local_lr == Approx(0.5));
  CHECK(fam_back.resolved_toml == fam.resolved_toml);
  // [[faults]] entries, each with its own "when", read back as given.
  const auto f = parse_config("[topology]\nkind = \"ring\"\nworkers = 4\n"
                              "[[faults]]\nkind = \"kill\"\nrank = 1\nat_step = 3\n"
                              "[[faults]]\nkind = \"stall\"\nrank = 2\nat_seconds = 0.5\nseconds = 1.0\n"
                              "[[faults]]\nkind = \"kill\"\nmtbf_s = 2.0\nmtbf_per_worker = true\n",
                              "f.toml");
  const auto back = parse_config(f.resolved_toml, "resolved.toml");
  REQUIRE(back.faults.size() == 3u);
  CHECK(back.faults[0].at_step == 3);
  CHECK(back.faults[1].at_seconds == Approx(0.5));
  CHECK(back.faults[2].mtbf_s == Approx(2.0));
  CHECK(back.faults[2].mtbf_per_worker);
  CHECK_FALSE(back.faults[0].mtbf_per_worker);
  // A key of [[faults]] from --set reaches every entry, and needs one.
  const auto moved = parse_config("[topology]\nkind = \"ring\"\nworkers = 4\n"
                                  "[[faults]]\nkind = \"kill\"\nrank = 1\nat_step = 3\n",
                                  "m.toml", {"faults.rank=2"});
  CHECK(moved.faults.at(0).rank == 2);
  CHECK_THROWS_WITH(parse_config("", "n.toml", {"faults.mtbf_s=1"}),
                    Catch::Contains("--set faults.mtbf_s=1: there is no [[faults]] entry to set mtbf_s in"));
}

TEST_CASE("unknown keys name file, line and the nearest valid key") {
  CHECK_THROWS_WITH(parse_config("[train]\nepochs = 1\nlr_rate = 0.1\n", "exp.toml"),
                    Catch::Contains("exp.toml:3") && Catch::Contains("unknown key 'train.lr_rate'") &&
                      Catch::Contains("did you mean 'train.lr'"));
  CHECK_THROWS_WITH(parse_config("[trian]\nepochs = 1\n", "exp.toml"),
                    Catch::Contains("unknown section [trian]") && Catch::Contains("[train]"));
  CHECK_THROWS_WITH(parse_config("", "exp.toml", {"train.batchsize=3"}),
                    Catch::Contains("--set train.batchsize=3") && Catch::Contains("train.batch_size"));
}

TEST_CASE("wrong types, bad values and out-of-range numbers are located") {
  CHECK_THROWS_WITH(parse_config("[train]\n\nepochs = \"five\"\n", "t.toml"),
                    Catch::Contains("t.toml:3") && Catch::Contains("train.epochs must be an integer"));
  CHECK_THROWS_WITH(parse_config("[model]\nkind = \"lenet\"\n", "t.toml"),
                    Catch::Contains("t.toml:2") && Catch::Contains("did you mean \"lenet5\""));
  CHECK_THROWS_WITH(parse_config("[train]\nbatch_size = 0\n", "t.toml"),
                    Catch::Contains("t.toml:2") && Catch::Contains("train.batch_size") &&
                      Catch::Contains("out of range"));
  CHECK_THROWS_WITH(parse_config("[train]\ndevice = \"gpu\"\n", "t.toml"),
                    Catch::Contains("t.toml:2") && Catch::Contains("unknown device 'gpu'"));
  CHECK_THROWS_WITH(parse_config("[model]\nhidden = [256, 0]\n", "t.toml"),
                    Catch::Contains("model.hidden"));
  CHECK_THROWS_WITH(parse_config("[train]\nlr = 1e-1\nlr = 2\n", "t.toml"),
                    Catch::Contains("t.toml:3") && Catch::Contains("syntax error"));
  CHECK_THROWS_WITH(parse_config("", "t.toml", {"train.lr"}), Catch::Contains("expected key=value"));
  CHECK_THROWS_WITH(parse_config("[train]\nthreads = 2\n", "t.toml", {"train.threads=0"}),
                    Catch::Contains("--set train.threads=0: train.threads = 0 is out of range [1, 256]"));
  // A range is checked where the value is written, whether or not this run reads it.
  CHECK_THROWS_WITH(parse_config("[topology]\nkind = \"ring\"\nouter_lr = 0\n", "t.toml"),
                    Catch::Contains("t.toml:3: topology.diloco.outer_lr = 0 is out of range [1e-06, 100]: it must be greater than 0"));
  CHECK_THROWS_WITH(load_config("/nonexistent/x.toml"), Catch::Contains("/nonexistent/x.toml"));
  // Speed balancing splits a synchronous allreduce's batch: elsewhere it is refused, where it was written.
  CHECK_THROWS_WITH(parse_config("[topology]\nkind = \"parameter-server\"\nbalance_every = 10\n", "t.toml"),
                    Catch::Contains("t.toml:3") && Catch::Contains("topology.ring.balance_every") &&
                      Catch::Contains("not parameter-server"));
  CHECK(parse_config("[topology]\nkind = \"ring\"\nbalance_every = 10\n", "t.toml").ring.balance_every == 10);
}

TEST_CASE("node groups (nodes tables): parsed, counted, and checked") {
  const std::string topo = "[topology]\nkind = \"parameter-server\"\nworkers = 4\n";
  auto c = parse_config(topo + "[[nodes]]\nname = \"fast\"\ncount = 2\n[[nodes]]\nname = \"slow\"\ncount = 2\n"
                              "slowdown = 3.0\nbatch_size = 32\n", "n.toml");
  REQUIRE(c.nodes.size() == 2);
  CHECK(c.nodes[1].name == "slow");
  CHECK(c.nodes[1].slowdown == 3.0);
  CHECK(c.nodes[1].batch_size == 32);
  CHECK(c.nodes[0].batch_size == 0);
  CHECK_THAT(c.resolved_toml, Catch::Contains("[[nodes]]"));
  CHECK(parse_config(c.resolved_toml, "resolved.toml").nodes.size() == 2);
  CHECK_THROWS_WITH(parse_config(topo + "[[nodes]]\ncount = 3\n", "n.toml"),
                    Catch::Contains("describe 3 worker(s) but topology.workers = 4"));
  CHECK_THROWS_WITH(parse_config(topo + "[[nodes]]\ncount = 4\nslowness = 2\n", "n.toml"),
                    Catch::Contains("n.toml:6") && Catch::Contains("did you mean 'nodes.slowdown'"));
  CHECK_THROWS_WITH(parse_config(topo + "[[nodes]]\ncount = 4\nslowdown = 0.5\n", "n.toml"),
                    Catch::Contains("n.toml:6: nodes.slowdown = 0.5 is out of range [1, 1000]"));
  CHECK_THROWS_WITH(parse_config(topo + "[nodes]\ncount = 4\n", "n.toml"), Catch::Contains("write [[nodes]]"));
  CHECK_THROWS_WITH(parse_config("[[nodes]]\ncount = 2\n", "n.toml"), Catch::Contains("other than \"single\""));
}

TEST_CASE("every key's default lies in its range, and gradwire keys shows the range") {
  for (const auto& k : config_schema()) {
    if (k.range == any_value)
      continue;
    INFO(k.key << " = " << k.default_value);
    REQUIRE((k.type == value_type::integer || k.type == value_type::number));
    const auto t = toml::parse("v = " + k.default_value);
    const double v = k.type == value_type::integer ? static_cast<double>(t["v"].value<std::int64_t>().value_or(-1))
                                                   : t["v"].value<double>().value_or(-1);
    CHECK(v >= k.range.first);
    CHECK(v <= k.range.second);
  }
  CHECK_THAT(describe_keys(), Catch::Contains("# number of workers (every topology.kind but \"single\", which trains one) [1, 1024]"));
}

TEST_CASE("gradwire keys lists every section") {
  auto k = describe_keys();
  for (const char* s : {"[experiment]", "[model]", "[data]", "[train]", "lr = 0.05", "fashion-mnist"})
    CHECK_THAT(k, Catch::Contains(s));
}

TEST_CASE("the shipped example configs parse") {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(GW_SOURCE_DIR) + "/examples"))
    if (e.path().extension() == ".toml") {
      INFO(e.path());
      CHECK_NOTHROW(load_config(e.path().string()));
      ++n;
    }
  CHECK(n >= 18);
}

TEST_CASE("sweep axes and sweep variants in file order and mistakes name the line and key") {
  auto c = parse_config("[sweep]\n\"topology.workers\" = [1, 2]\n\"experiment.seed\" = [1, 2]\n[sweep.variants]\n"
                        "\"sync\" = { \"topology.kind\" = \"parameter-server\", \"topology.ps.mode\" = \"sync\" }\n"
                        "\"a ring\" = { topology.kind = \"ring\", topology.workers = 4 }\n",
                        "s.toml");
  REQUIRE(c.sweep.size() == 2);
  CHECK(c.sweep[0].first == "topology.workers"); // file order: the last axis varies fastest
  CHECK(c.sweep[1].first == "experiment.seed");
  CHECK(c.sweep[1].second == std::vector<std::string>{"1", "2"});
  REQUIRE(c.sweep_variants.size() == 2);
  CHECK(c.sweep_variants[0].first == "sync"); // file order, not toml++'s sorted order
  CHECK(c.sweep_variants[1].first == "a ring");
  CHECK(c.sweep_variants[0].second ==
        std::vector<std::string>{"topology.kind='parameter-server'", "topology.ps.mode='sync'"}); // TOML literal strings
  CHECK(c.sweep_variants[1].second == std::vector<std::string>{"topology.kind='ring'", "topology.workers=4"});
  CHECK_THROWS_WITH(parse_config("[sweep.variants]\nx = { \"topology.kinds\" = \"ring\" }\n", "s.toml"),
                    Catch::Contains("s.toml:2") && Catch::Contains("unknown key 'topology.kinds'") &&
                      Catch::Contains("did you mean 'topology.kind'"));
  CHECK_THROWS_WITH(parse_config("[sweep.variants]\nx = 3\n", "s.toml"),
                    Catch::Contains("s.toml:2") && Catch::Contains("must be a table"));
  CHECK_THROWS_WITH(parse_config("[sweep]\n\"train.lr\" = []\n", "s.toml"),
                    Catch::Contains("s.toml:2") && Catch::Contains("non-empty array"));
}

TEST_CASE("node groups carry their device and threads, and a bad device names the group's line") {
  auto c = parse_config("[topology]\nkind = \"ring\"\nworkers = 3\n"
                        "[[nodes]]\nname = \"gpu\"\ncount = 1\ndevice = \"cuda:1\"\n"
                        "[[nodes]]\nname = \"cpu\"\ncount = 2\nthreads = 2\n",
                        "n.toml");
  REQUIRE(c.nodes.size() == 2);
  CHECK(c.nodes[0].device == "cuda:1");
  CHECK(c.nodes[0].threads == 0); // train.threads
  CHECK(c.nodes[1].device.empty()); // train.device
  CHECK(c.nodes[1].threads == 2);
  CHECK_THAT(c.resolved_toml, Catch::Contains("device = 'cuda:1'"));
  CHECK_THROWS_WITH(parse_config("[topology]\nkind = \"ring\"\nworkers = 1\n[[nodes]]\ndevice = \"gpu0\"\n", "n.toml"),
                    Catch::Contains("n.toml:4") && Catch::Contains("unknown device 'gpu0'"));
  CHECK_THROWS_WITH(parse_config("[topology]\nkind = \"ring\"\nworkers = 1\n[[nodes]]\nthreads = -1\n", "n.toml"),
                    Catch::Contains("n.toml:5: nodes.threads = -1 is out of range [0, 256]"));
}

TEST_CASE("topology options reach their structs whole: keys of another kind or mode stay off") {
  auto ps = parse_config("[topology]\nkind = \"parameter-server\"\nlocal_steps = 4\n[topology.ps]\nmode = \"async\"\n"
                         "staleness_bound = 3\nshards = 2\nbackup_workers = 1\n", "t.toml");
  CHECK(ps.ps.shards == 2);
  CHECK_FALSE(ps.ps.sync);
  CHECK(ps.ps.local_steps == 0);      // local_steps is local SGD's
  CHECK(ps.ps.staleness_bound == -1); // the bound is SSP's
  CHECK(ps.ps.backups() == 0);        // backup workers are the sync server's
  CHECK(ps.ps.uses_push_pull());
  auto ssp = parse_config("[topology]\nkind = \"parameter-server\"\n[topology.ps]\nmode = \"ssp\"\nstaleness_bound = 3\n", "t.toml");
  CHECK(ssp.ps.bound() == 3);
  CHECK_FALSE(ssp.ps.uses_push_pull());
  auto local = parse_config("[topology]\nkind = \"local-sgd\"\nlocal_steps = 4\n", "t.toml");
  CHECK(local.ps.local_sgd());
  CHECK(local.ps.local_steps == 4);
  CHECK(local.ps.dc() == 0.f);
  auto ring = parse_config("[topology]\nkind = \"ring\"\n[topology.ring]\nbucket_kb = 8\nchunk_kb = 2\noverlap = true\n", "t.toml");
  const auto flat_ring = parse_config("[topology]\nkind = \"ring\"\nbucket_kb = 8\nchunk_kb = 2\noverlap = true\n", "f.toml");
  CHECK(flat_ring.resolved_toml == ring.resolved_toml); // the flat names of earlier releases still read
  CHECK(ring.ring.bucket_floats == 8 * 256);
  CHECK(ring.ring.chunk_floats == 2 * 256);
  CHECK(ring.ring.overlap);
  auto gossip = parse_config("[topology]\nkind = \"gossip\"\n[topology.gossip]\nmode = \"adpsgd\"\ngraph = \"torus\"\n", "t.toml");
  CHECK(gossip.gossip.mode == actors::gossip_mode::adpsgd);
  CHECK(gossip.gossip.graph == "torus");
}

TEST_CASE("a family's keys live in its own table, and their flat names still read") {
  const auto flat = parse_config("[topology]\nkind = \"diloco\"\nlocal_steps = 8\nouter_lr = 0.5\nfragments = 2\n", "f.toml");
  const auto now = parse_config("[topology]\nkind = \"diloco\"\nlocal_steps = 8\n[topology.diloco]\nouter_lr = 0.5\n"
                                "[topology.streaming]\nfragments = 2\n",
                                "n.toml");
  CHECK(now.ps.outer_lr == 0.5f);
  CHECK(now.ps.fragments == 2);
  CHECK(flat.ps.outer_lr == now.ps.outer_lr);
  CHECK(flat.ps.fragments == now.ps.fragments);
  CHECK(flat.resolved_toml == now.resolved_toml); // config.toml holds the new names
  CHECK_THAT(flat.resolved_toml, Catch::Contains("[topology.diloco]") && Catch::Contains("[topology.streaming]"));
  // --set and a sweep take the flat names too, under the new ones.
  CHECK(parse_config("[topology]\nkind = \"diloco\"\n", "s.toml", {"topology.outer_momentum=0.5"}).ps.outer_momentum ==
        0.5f);
  const auto sw = parse_config("[sweep.variants]\nx = { \"topology.outer_lr\" = 0.25 }\n", "v.toml");
  REQUIRE(sw.sweep_variants.size() == 1);
  CHECK(sw.sweep_variants[0].second == std::vector<std::string>{"topology.diloco.outer_lr=0.25"});
  CHECK_THROWS_WITH(parse_config("[topology]\nouter_lr = 0.5\n[topology.diloco]\nouter_lr = 0.6\n", "b.toml"),
                    Catch::Contains("b.toml:2: topology.outer_lr and topology.diloco.outer_lr (b.toml:4) are one key"));
  CHECK(find_key("topology.diloco.outer_lr") != nullptr);
  CHECK(find_key("topology.outer_lr") == nullptr); // gradwire keys lists the new names alone
}

TEST_CASE("the parameter server's keys live in topology.ps and compression's in its own section and their flat names still read") {
  const auto flat = parse_config("[topology]\nkind = \"parameter-server\"\nmode = \"async\"\nshards = 2\n"
                                 "staleness_lr = true\ndc_lambda = 0.04\npush_pull = false\nshard_placement = \"spread\"\n"
                                 "[transport]\ncompress = \"topk\"\ncompress_ratio = 0.05\ncompress_ef = false\n",
                                 "f.toml");
  const auto now = parse_config("[topology]\nkind = \"parameter-server\"\n[topology.ps]\nmode = \"async\"\nshards = 2\n"
                                "staleness_lr = true\ndc_lambda = 0.04\npush_pull = false\nshard_placement = \"spread\"\n"
                                "[compression]\nkind = \"topk\"\nratio = 0.05\nerror_feedback = false\n",
                                "n.toml");
  CHECK_FALSE(now.ps.sync);
  CHECK(now.ps.shards == 2);
  CHECK(now.ps.staleness_lr);
  CHECK(now.ps.dc_lambda == 0.04f);
  CHECK_FALSE(now.ps.push_pull);
  CHECK(now.ps.spread_shards);
  CHECK(now.compress.mode == models::compress_mode::topk);
  CHECK(now.compress.ratio == Approx(0.05));
  CHECK_FALSE(now.compress.error_feedback);
  CHECK(flat.resolved_toml == now.resolved_toml); // config.toml holds the new names
  CHECK_THAT(now.resolved_toml, Catch::Contains("[topology.ps]") && Catch::Contains("[compression]"));
  // --set and a sweep take the flat names too, under the new ones.
  CHECK(parse_config("[topology]\nkind = \"parameter-server\"\n", "s.toml", {"topology.shards=3"}).ps.shards == 3);
  const auto sw = parse_config("[sweep.variants]\nx = { \"transport.compress\" = \"sign\" }\n", "v.toml");
  REQUIRE(sw.sweep_variants.size() == 1);
  CHECK(sw.sweep_variants[0].second == std::vector<std::string>{"compression.kind='sign'"});
  // A bad value is cited where the file gave it, under the new name; a key given both ways is refused.
  CHECK_THROWS_WITH(parse_config("[topology]\nkind = \"parameter-server\"\nshards = 0\n", "d.toml"),
                    Catch::Contains("d.toml:3: topology.ps.shards"));
  CHECK_THROWS_WITH(parse_config("[transport]\ncompress = \"sign\"\n[compression]\nkind = \"topk\"\n", "b.toml"),
                    Catch::Contains("b.toml:2: transport.compress and compression.kind (b.toml:4) are one key"));
  CHECK(find_key("topology.mode") == nullptr);
  CHECK(find_key("transport.compress") == nullptr);
}

TEST_CASE("gossip's keys live in the table topology.gossip, once the flat mode's name, and their flat names still read") {
  const auto flat = parse_config("[topology]\nkind = \"gossip\"\ngossip = \"adpsgd\"\ngraph = \"random\"\ndegree = 4\n"
                                 "gossip_compression = \"naive\"\nconsensus_lr = 0.5\n",
                                 "f.toml");
  const auto now = parse_config("[topology]\nkind = \"gossip\"\n[topology.gossip]\nmode = \"adpsgd\"\ngraph = \"random\"\n"
                                "degree = 4\ncompression = \"naive\"\nconsensus_lr = 0.5\n",
                                "n.toml");
  CHECK(now.gossip.mode == actors::gossip_mode::adpsgd);
  CHECK(now.gossip.graph == "random");
  CHECK(now.gossip.degree == 4);
  CHECK(now.gossip.rule == models::gossip_rule::naive);
  CHECK(now.gossip.consensus_lr == 0.5f);
  CHECK(flat.resolved_toml == now.resolved_toml);
  // The flat mode given by --set, beside the table in the file; a sweep's flat key.
  CHECK(parse_config("[topology]\nkind = \"gossip\"\n[topology.gossip]\ngraph = \"complete\"\n", "s.toml",
                     {"topology.gossip=adpsgd"})
          .gossip.mode == actors::gossip_mode::adpsgd);
  const auto sw = parse_config("[sweep.variants]\nx = { \"topology.gossip\" = \"adpsgd\" }\n", "v.toml");
  REQUIRE(sw.sweep_variants.size() == 1);
  CHECK(sw.sweep_variants[0].second == std::vector<std::string>{"topology.gossip.mode='adpsgd'"});
  // A bad value is still cited where the file gave it, under the new name.
  CHECK_THROWS_WITH(parse_config("[topology]\nkind = \"gossip\"\ndegree = 1\n", "d.toml"),
                    Catch::Contains("d.toml:3: topology.gossip.degree"));
  CHECK(find_key("topology.gossip") == nullptr);
}
