// gradwire-bench-topology: in-process throughput of every topology with 1, 2
// and 4 workers on Fashion-MNIST (MLP 784-256-128-10, batch 64 per worker,
// one thread per worker), in one run:
//
//   - samples/s and scaling efficiency (throughput_n / n) / throughput_1 of
//     each topology against its own 1-worker run;
//   - the peer: "independent", N workers with no exchange at all (local SGD
//     that never averages), the most this machine gives N workers; each
//     topology's ratio to it isolates the cost of its exchange from the
//     cost of sharing cores and memory;
//   - the runtime overhead: step time minus compute time, as a fraction of
//     step time (workers' compute vs wall seconds); for lockstep topologies
//     split into load imbalance (waiting for a slower worker's compute)
//     and exchange (the step time left after the slowest worker computed:
//     the runtime's own cost; scheduler/app/step_breakdown.hpp);
//   - the actor layer's messages per second (ping-pong between two actors).
//
//   gradwire-bench-topology [--steps 600] [--rounds 3] [--workers 1,2,4] [--only ring]
//
// Rounds are interleaved (every configuration once per round) and medians
// reported, since this 2-core VM drifts 20-30% over a minute.
#include "actors/system_config.hpp"
#include "models/dataset.hpp"
#include "scheduler/app/step_breakdown.hpp"
#include "scheduler/runtime/topology.hpp"
#include "scheduler/runtime/gossip_wiring.hpp"
#include "scheduler/runtime/ps_wiring.hpp"
#include "scheduler/runtime/ring_wiring.hpp"

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace gm = gradwire::models;
namespace gs = gradwire::scheduler;
using clk = std::chrono::steady_clock;

namespace {

struct variant {
  std::string name;
  const gs::topology_family* kind;
  bool sync = true;
  int local_steps = 0;
  bool sharded_update = true; ///< ring: each worker updates only its chunks
  int balance_every = 0;      ///< ring: re-split the global batch by speed every N steps
};

struct measure {
  double samples_per_sec = 0;
  double overhead = 0; ///< 1 - compute / wall, mean over workers
  double imbalance = -1, exchange = -1; ///< its split (lockstep topologies; -1: none)
};

measure run_once(caf::actor_system& sys, const variant& v, int workers, std::int64_t steps, const gm::dataset& data) {
  gs::topology_setup s;
  s.family = v.kind;
  s.workers = workers;
  s.ps.shards = 1;
  s.ps.sync = v.sync;
  s.ps.local_steps = v.local_steps;
  s.opt.momentum = v.sync ? 0.9f : 0.f;
  s.batch_size = 64;
  s.steps = steps;
  s.ring.group_size = 2;
  s.log_every = 1 << 30;
  s.ring.sharded_update = v.sharded_update;
  s.ring.balance_every = v.balance_every;
  s.spin_wait = gs::spin_wait_default(workers);
  auto out = gs::run_topology(sys, s, data);
  measure m;
  std::int64_t samples = 0;
  double busy = 0, wall = 0;
  for (const auto& r : out.reports) {
    samples += r.samples;
    busy += r.compute_seconds;
    wall += r.seconds;
  }
  // Throughput over the workers' own time (spawning and the final fetch excluded).
  m.samples_per_sec = static_cast<double>(samples) / (wall / static_cast<double>(out.reports.size()));
  m.overhead = 1.0 - busy / wall;
  if (const auto b = gs::lockstep(s) ? gs::breakdown_of(out.reports) : gs::step_breakdown{}; b.steps > 0) {
    m.imbalance = b.imbalance;
    m.exchange = b.exchange;
  }
  return m;
}

/// Round trips per second between two event-based actors (two messages each).
double messages_per_second(caf::actor_system& sys, int round_trips) {
  auto pong = sys.spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](int i) { return i; }};
  });
  caf::scoped_actor self{sys};
  auto ping = sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
    return {
      [=](caf::atom_value, int n, caf::actor) {
        auto left = std::make_shared<int>(n);
        auto rp = std::make_shared<caf::response_promise>(me->make_response_promise());
        auto step = std::make_shared<std::function<void()>>();
        *step = [=] {
          if ((*left)-- == 0) {
            rp->deliver(0);
            return;
          }
          me->request(pong, caf::infinite, *left).then([=](int) { (*step)(); });
        };
        (*step)();
        return *rp;
      },
    };
  });
  const auto t0 = clk::now();
  self->request(ping, caf::infinite, caf::atom("go"), round_trips, caf::actor{}).receive([](int) {}, [](caf::error&) {});
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  self->send_exit(ping, caf::exit_reason::user_shutdown);
  self->send_exit(pong, caf::exit_reason::user_shutdown);
  return 2.0 * round_trips / s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Every variant's runs, by (name, workers): rate, overhead, imbalance, exchange.
struct measured {
  std::map<std::pair<std::string, int>, std::vector<double>> rate, overhead, imbalance, exchange;
};

std::vector<variant> variants_named(const std::string& only) {
  std::vector<variant> variants = {
    {"independent", &gs::local_sgd_family, true, 1 << 30},
    {"ring", &gs::ring_family, true, 0},
    {"ring-full-update", &gs::ring_family, true, 0, false}, // every worker applies the whole update
    {"ring-balanced", &gs::ring_family, true, 0, true, 20}, // batches follow each worker's speed
    {"hierarchical", &gs::hierarchical_family, true, 0},
    {"ps-sync", &gs::parameter_server_family, true, 0},
    {"ps-async", &gs::parameter_server_family, false, 0},
    {"local-sgd-8", &gs::local_sgd_family, true, 8},
    {"gossip-dpsgd", &gs::gossip_family, true, 0},
  };
  variants.erase(std::remove_if(variants.begin(), variants.end(),
                                [&](const variant& v) {
                                  return !only.empty() && v.name != "independent" &&
                                         v.name.find(only) == std::string::npos;
                                }),
                 variants.end());
  return variants;
}

void print_table(const std::vector<variant>& variants, const std::vector<int>& counts, const measured& m,
                 std::int64_t steps, int rounds) {
  fmt::print("# in-process, MLP 784-256-128-10, batch 64 per worker, 1 thread per worker, {} steps per worker, "
             "median of {} interleaved rounds\n",
             steps, rounds);
  fmt::print("{:<16} {:>7} {:>10} {:>8} {:>11} {:>14} {:>9} {:>10} {:>9}\n", "topology", "workers", "samples/s",
             "speedup", "efficiency", "vs_independent", "overhead", "imbalance", "exchange");
  for (const auto& v : variants)
    for (int n : counts) {
      const double r = median(m.rate.at({v.name, n}));
      const double r1 = m.rate.count({v.name, 1}) ? median(m.rate.at({v.name, 1})) : 0;
      const double ind = m.rate.count({"independent", n}) ? median(m.rate.at({"independent", n})) : 0;
      const double imb = median(m.imbalance.at({v.name, n})), exch = median(m.exchange.at({v.name, n}));
      auto pct = [](double x) { return x < 0 ? std::string("-") : fmt::format("{:.1f}%", 100 * x); };
      fmt::print("{:<16} {:>7} {:>10.0f} {:>8.2f} {:>10.1f}% {:>14.2f} {:>8.1f}% {:>10} {:>9}\n", v.name, n, r,
                 r1 > 0 ? r / r1 : 0, r1 > 0 ? 100 * r / n / r1 : 0, ind > 0 ? r / ind : 0,
                 100 * median(m.overhead.at({v.name, n})), pct(imb), pct(exch));
    }
  fmt::print("# efficiency = (samples/s with n workers / n) / samples/s with 1; vs_independent = samples/s over n "
             "workers that never exchange (the machine's limit for n workers); overhead = 1 - compute/wall per "
             "worker = imbalance (waiting for a slower worker's compute, summed per step) + exchange (the step time "
             "left once the slowest worker has computed: the runtime's cost), lockstep topologies only\n");
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradwire-bench-topology: in-process throughput and scaling of every topology"};
  std::int64_t steps = 600;
  int rounds = 3;
  std::vector<int> counts = {1, 2, 4};
  std::string only;
  app.add_option("--steps", steps, "steps per worker per run");
  app.add_option("--rounds", rounds, "interleaved rounds (medians reported)");
  app.add_option("--workers", counts, "worker counts")->delimiter(',');
  app.add_option("--only", only, "run only the topologies whose name contains this");
  CLI11_PARSE(app, argc, argv);

  const auto data = gm::load_mnist_dir(gm::fashion_mnist_default_dir, true, "fashion-mnist");
  caf::actor_system_config cfg;
  gradwire::actors::configure_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
  const auto variants = variants_named(only);
  measured m;
  for (int round = 0; round < rounds; ++round)
    for (const auto& v : variants)
      for (int n : counts) {
        const auto one = run_once(sys, v, n, steps, data);
        m.rate[{v.name, n}].push_back(one.samples_per_sec);
        m.overhead[{v.name, n}].push_back(one.overhead);
        m.imbalance[{v.name, n}].push_back(one.imbalance);
        m.exchange[{v.name, n}].push_back(one.exchange);
      }
  print_table(variants, counts, m, steps, rounds);
  fmt::print("actor messages/s (request-reply ping-pong, 2 scheduler threads): {:.0f}\n",
             messages_per_second(sys, 200000));
  return 0;
}
