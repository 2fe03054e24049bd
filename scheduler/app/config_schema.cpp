#include "scheduler/app/config_schema.hpp"

#include "models/network.hpp"
#include "scheduler/runtime/topology_registry.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>

namespace gradwire::scheduler {

namespace {

/// "single", then every family of the topology registry.
std::vector<std::string> topology_kind_names() {
  std::vector<std::string> names = {"single"};
  for (const auto* f : topology_families())
    names.emplace_back(f->name);
  return names;
}

std::string topology_kind_doc() {
  std::string doc = "single: one worker, no actors";
  for (const auto* f : topology_families())
    doc += std::string("; ") + f->name + ": " + f->doc;
  return doc;
}

/// [experiment].
void experiment_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"experiment.name", vt::string, "\"default\"", {}, "name of the run; also the default results folder name"},
    {"experiment.seed", vt::integer, "1", {}, "seed for initialisation, shuffling and sharding", in(0, INT64_MAX)},
    {"experiment.out", vt::string, "\"\"", {}, "results folder (default results/<name>); --out overrides"},
    {"experiment.run_id", vt::string, "\"\"", {}, "the run's identity, written by gradwire as a run starts (a new run gets a new one, whatever the file says) into config.toml, summary.json, every checkpoint and every record; --resume and replay refuse a checkpoint or record of another run. Leave it out"},
    {"experiment.tensorboard", vt::boolean, "false", {},
     "also write TensorBoard event files in tb/ as the run goes (`gradwire export --tensorboard` for a finished run)"},
    {"experiment.clock", vt::string, "\"real\"", {"real", "virtual"},
     "real: the machine's clock and threads; virtual: every worker simulated on one thread by a deterministic discrete-event loop, gradients computed for real and time taken from [virtual]'s compute and link models (every topology but single; up to 1,024 workers on one machine)"},
    {"experiment.trace", vt::boolean, "true", {}, "write trace.json: spans per actor (compute, exchange, wait, apply, ring send/reduce) for Perfetto or chrome://tracing"},
    {"experiment.trace_spans", vt::integer, "20000", {}, "spans kept per actor in trace.json (a ring buffer: the last ones; bounds the file)", in(1, 10000000)},
    {"experiment.record", vt::boolean, "true", {}, "async parameter servers: each shard writes the order of the updates it applied and the pulls it answered to record/ (a few bytes each), so that `gradwire replay` can run the run again bit for bit, or a variant on the same schedule"},
    {"experiment.record_max_mb", vt::integer, "256", {}, "bound on each shard's record file, in MiB (a replay follows a record that far)", in(1, std::int64_t{1} << 20)},

  });
}

/// [model] and [data].
void model_and_data_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"model.kind", vt::string, "\"mlp\"", models::model_kinds(), "network (gpt: a decoder-only transformer over bytes or token ids; it needs data.dataset = \"text\" or \"tokens\"; torch: your own nn.Module, model.module)"},
    {"model.module", vt::string, "\"\"", {}, "torch: the .py file that defines model(cfg) (relative to the config file's folder, or absolute; docs/your-model.md); [model.args] is free-form, handed to it as cfg[\"model\"][\"args\"]"},
    {"model.hidden", vt::int_list, "[256, 128]", {}, "MLP hidden layer widths"},
    {"model.layers", vt::integer, "4", {}, "gpt: transformer blocks", in(1, 1024)},
    {"model.heads", vt::integer, "4", {}, "gpt: attention heads per block (they must divide model.d_model)", in(1, 1024)},
    {"model.d_model", vt::integer, "128", {}, "gpt: width of the residual stream (the MLP is 4x this)", in(1, 65536)},
    {"model.context", vt::integer, "128", {}, "gpt: tokens per sequence (a text window is this plus the byte it predicts last)", in(1, 1 << 20)},
    {"model.vocab", vt::integer, "256", {}, "gpt: vocabulary size; text data is bytes, so 256; tokens: the tokenizer's (every id below it)", in(2, 1 << 24)},
    {"model.dropout", vt::number, "0.0", {}, "gpt: in training, drop each element of the embeddings' sum, of attention's probabilities and of each block's two residual branches with this probability, in [0, 1) (nanoGPT's dropout); masks follow the seed, the worker and the step", in(0, 1)},

    {"data.dataset", vt::string, "\"fashion-mnist\"", {"fashion-mnist", "mnist", "cifar10", "synthetic", "synthetic-cifar", "text", "tokens", "module"},
     "dataset; synthetic ones are generated from the seed (28x28x1 or 32x32x3); text: the bytes of data.path, tokens: the uint16 ids of data.path's .bin (nanoGPT's format), both for model.kind = \"gpt\" or \"torch\"; module: a torch module's own dataset(split, cfg)"},
    {"data.path", vt::string, "\"\"", {}, "folder with the dataset files (default: /usr/share/datasets/fashion-mnist for fashion-mnist, /usr/share/games/fortunes for text); text may be one file; tokens: one .bin, or a folder with train.bin and val.bin"},
    {"data.val_fraction", vt::number, "0.1", {}, "text, and tokens from one .bin: the last fraction of the bytes (ids), held out for validation", in(1e-6, 0.999999)},
    {"data.partition", vt::string, "\"iid\"", {"iid", "dirichlet", "classes", "contiguous"},
     "how the training set is split over the workers: iid (a seeded permutation, dealt out), dirichlet (label skew: per class, shares over the workers drawn from Dirichlet(data.dirichlet_alpha); Hsu et al. 2019) or classes (data.classes_per_worker one-class pieces each; McMahan et al. 2017); text: iid or contiguous (each worker's windows from its own stretch of the corpus, in order of position)"},
    {"data.dirichlet_alpha", vt::number, "0.5", {}, "dirichlet partition: concentration; small (0.1) gives each worker few classes, large (100) is close to iid", in(1e-3, 1e6)},
    {"data.classes_per_worker", vt::integer, "2", {}, "classes partition: the one-class pieces (sorted by label, world x k of them) each worker gets", in(1, 1'000'000)},
    {"data.train_subset", vt::integer, "0", {}, "use only the first N training samples (0 = all); only those are read", in(0, INT64_MAX)},
    {"data.test_subset", vt::integer, "0", {}, "evaluate on only the first N test samples (0 = all); only those are read", in(0, INT64_MAX)},
    {"data.synthetic_train", vt::integer, "10000", {}, "training samples of a synthetic dataset", in(1, 10'000'000)},
    {"data.synthetic_test", vt::integer, "2000", {}, "test samples of a synthetic dataset", in(1, 10'000'000)},
    {"data.if_missing", vt::string, "\"error\"", {"error", "synthetic"},
     "when the dataset's files are absent: stop with an error, or train on synthetic data of the same shape (said on stderr and in summary.json's dataset)"},
    {"data.normalize", vt::boolean, "true", {}, "standardise pixels with the training set's mean and std (else pixels / 255)"},

  });
}

/// [train]: the optimizer, its schedule and the data it takes.
void train_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"train.epochs", vt::integer, "5", {}, "passes over the training set", in(1, 100000)},
    {"train.max_steps", vt::integer, "0", {}, "stop after this many steps (0 = no limit)", in(0, INT64_MAX)},
    {"train.budget", vt::string, "\"per-worker\"", {"per-worker", "shared"},
     "per-worker: every worker runs the same steps; shared: the same total samples, shared out by speed (async parameter server, SSP, AD-PSGD and async DiLoCo: fast workers do more steps; the others run in lock step, so it is the same)"},
    {"train.batch_size", vt::integer, "64", {}, "samples per step per worker", in(1, 1 << 20)},
    {"train.optimizer", vt::string, "\"sgd\"", {"sgd", "adam", "adamw"},
     "optimizer (adamw: Adam with decoupled weight decay on weight matrices only, not biases, norms or embeddings)"},
    {"train.betas", vt::number_list, "[0.9, 0.999]", {}, "adam, adamw: the moment decay rates beta1, beta2"},
    {"train.eps", vt::number, "1e-8", {}, "adam, adamw: the denominator's epsilon", in(1e-30, 1)},
    {"train.clip_norm", vt::number, "0.0", {},
     "scale each worker's gradient to at most this L2 norm before it is applied or sent (0 = off); in every topology the norm is of the gradient of the worker's own batch", in(0, 1e12)},
    {"train.on_nonfinite", vt::string, "\"stop\"", {"stop", "skip", "continue"}, "a NaN or infinite loss or gradient: stop ends the run with status \"diverged\", naming the worker and step; skip drops that step's gradient (zeroed; momentum still moves); continue applies it"},
    {"train.accumulate", vt::integer, "1", {}, "split each worker's batch into this many micro-batches, their gradients summed (the same step, less activation memory)", in(1, 1 << 20)},
    {"train.lr", vt::number, "0.05", {}, "learning rate", in(1e-12, 1e6)},
    {"train.momentum", vt::number, "0.9", {}, "SGD momentum", in(0, 0.999999)},
    {"train.lr_schedule", vt::string, "\"constant\"", {"constant", "step", "cosine"},
     "after the warm-up: constant; step (times lr_step_factor every lr_step_epochs); cosine (to 0 at the end of the run)"},
    {"train.lr_step_epochs", vt::number, "0", {}, "step schedule: epochs between decays", in(0, 1e6)},
    {"train.lr_step_factor", vt::number, "0.1", {}, "step schedule: lr multiplied by this at each decay", in(1e-6, 1)},
    {"train.warmup_epochs", vt::number, "0", {}, "linear learning-rate warm-up over this many epochs (Goyal et al.: 5 with the linear scaling rule)", in(0, 1e6)},
    {"train.warmup_steps", vt::integer, "0", {}, "linear learning-rate warm-up over this many steps (instead of warmup_epochs)", in(0, std::int64_t{1} << 40)},
    {"train.momentum_warmup_epochs", vt::number, "0", {}, "momentum rises linearly from 0 over this many epochs (asynchronous SGD: damps stale gradients early on)", in(0, 1e6)},
    {"train.lr_base_batch", vt::integer, "0", {},
     "linear scaling rule: train.lr is for a global batch of this size, and the run uses lr x global batch / lr_base_batch (global batch: every worker's batch in lock-step topologies, one worker's where each update is one batch: async parameter server, AD-PSGD); 0 = off", in(0, 1 << 24)},
    {"train.nesterov", vt::boolean, "false", {}, "SGD Nesterov momentum"},
    {"train.weight_decay", vt::number, "0.0", {}, "weight decay: L2 on every parameter for sgd and adam; decoupled, on weight matrices, for adamw", in(0, 1)},
    {"train.target_accuracy", vt::number, "0.0", {}, "report time_to_target when test accuracy reaches this (0 = off)", in(0, 1)},
    {"train.threads", vt::integer, "1", {}, "CPU threads per worker", in(1, 256)},
    {"train.parallelism", vt::string, "\"auto\"", {"auto", "batch", "layer"},
     "how a worker uses its threads: batch = micro-batch replicas, layer = split GEMMs; auto = layer for MLPs, batch for conv nets"},
    {"train.device", vt::string, "\"cpu\"", {}, "\"cpu\" or \"cuda:N\""},
    {"train.precision", vt::string, "\"fp32\"", {"fp32", "bf16"},
     "what the GEMMs and attention compute in: fp32, or bf16 on a GPU's Tensor Cores (inputs rounded to bfloat16, sums in fp32); weights, activations, gradients and optimizer state stay fp32. bf16 needs every worker on a cuda device"},
  });
}

/// [topology] and its families' tables.
void topology_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"topology.kind", vt::string, "\"single\"", topology_kind_names(), topology_kind_doc()},
    {"topology.local_steps", vt::integer, "8", {}, "local-sgd, diloco, halos: steps each worker takes on its own between averages (H)", in(1, 1 << 20)},
    {"topology.diloco.outer_lr", vt::number, "0.7", {}, "diloco: the outer SGD's learning rate on the pseudo-gradient (1 with outer_momentum 0 is local SGD)", in(1e-6, 100)},
    {"topology.diloco.outer_momentum", vt::number, "0.9", {}, "diloco: the outer SGD's Nesterov momentum (0: none)", in(0, 0.999999)},
    {"topology.diloco.outer_delay", vt::integer, "0", {}, "diloco, mode async: delayed Nesterov (Liu et al. 2024, as forgather applies it): of every outer_delay pushes the first outer_delay - 1 are plain steps at outer_lr and the last the Nesterov step on the mean of all of them (0 or 1: every push a Nesterov step)", in(0, 1 << 20)},
    {"topology.diloco.dynamic_local_steps", vt::boolean, "false", {}, "diloco, mode async: dynamic local steps (DyLU, Liu et al. 2024): each worker's next round is local_steps x (the fastest worker's seconds per inner step / its own), rounded, at least 1, so slow workers push as often as fast ones; the paces are measured, each round's"},
    {"topology.streaming.fragments", vt::integer, "0", {}, "local-sgd, diloco (sync): Streaming DiLoCo, the parameters in this many fragments of whole tensors, exchanged on staggered schedules (fragment p every local_steps steps from floor(local_steps (p + 1) / fragments)); each is spread over topology.ps.shards shards. 0: not streaming; 1: the whole model on DiLoCo's schedule, which sync_delay may overlap (docs/low-communication.md)", in(0, 4096)},
    {"topology.streaming.sync_delay", vt::integer, "0", {}, "streaming local SGD, DiLoCo: inner steps a fragment's exchange overlaps; its new global values are pulled this many steps after the push (below local_steps / fragments)", in(0, 1 << 20)},
    {"topology.streaming.merge_alpha", vt::number, "0.0", {}, "streaming local SGD, DiLoCo with sync_delay: how much of the replica's own progress a fragment keeps when its global values land, x = global + merge_alpha (x - global) (0: the global values)", in(0, 1)},
    {"topology.halos.local_lr", vt::number, "0.25", {}, "halos: a local server's SGD learning rate on each of its workers' pseudo-gradients (Nesterov momentum local_momentum)", in(1e-6, 100)},
    {"topology.halos.local_momentum", vt::number, "0.0", {}, "halos: a local server's Nesterov momentum", in(0, 0.999)},
    {"topology.halos.global_lr", vt::number, "0.25", {}, "halos: the global server's SGD learning rate on each local server's progress (1 with global_momentum 0: the progress as it is)", in(1e-6, 100)},
    {"topology.halos.global_momentum", vt::number, "0.5", {}, "halos: the global server's Nesterov momentum", in(0, 0.999)},
    {"topology.halos.exchange_every", vt::integer, "4", {}, "halos: a local server sends its progress to the global server every this many of its workers' pushes (K), and goes on serving them meanwhile", in(1, 1 << 20)},
    {"topology.halos.merge_alpha", vt::number, "1.0", {}, "halos: how much of the global server's answer a local server takes, local += merge_alpha (global - local at the send): 1 is the global model plus the progress made during the exchange", in(0, 1)},
    {"topology.workers", vt::integer, "2", {}, "number of workers (every topology.kind but \"single\", which trains one)", in(1, 1024)},
    {"topology.ps.mode", vt::string, "\"sync\"", {"sync", "async", "ssp"},
     "parameter-server: sync waits for every worker each step; async applies each push at once; ssp = async within staleness_bound. diloco: sync averages each round's pseudo-gradients; async (async DiLoCo) applies each worker's as it comes"},
    {"topology.ps.staleness_bound", vt::integer, "2", {}, "ssp: a worker at step c waits until every worker has done c - bound steps", in(0, 1 << 20)},
    {"topology.ps.shards", vt::integer, "1", {}, "parameter-server: number of parameter shards", in(1, 1024)},
    {"topology.ps.staleness_lr", vt::boolean, "false", {}, "async: divide the learning rate by the staleness of each gradient"},
    {"topology.ps.rule", vt::string, "\"\"", {}, "async parameter server: \"FILE.py:Class\", a rule in Python that takes each push in place of the built-in one (docs/your-algorithm.md; needs the torch plug-in's Python)"},
    {"topology.ps.dc_lambda", vt::number, "0.0", {}, "async: DC-ASGD delay compensation g + lambda*g*g*(w - w_read) (0 = off; try 0.04)", in(0, 1e6)},
    {"topology.ps.push_pull", vt::boolean, "true", {}, "async parameter-server: a push's reply carries the shard's parameters after it, so each step is one round trip (ps-lite's ZPushPull); false: a separate pull before each step"},
    {"topology.ps.backup_workers", vt::integer, "0", {}, "sync parameter-server: apply the first workers - b gradients of each step, drop the b slowest", in(0, 1023)},
    {"topology.ps.shard_placement", vt::string, "\"rank0\"", {"rank0", "spread", "per-host"},
     "parameter-server shards: all on rank 0 (with the coordinator); spread, shard i on rank i mod processes; or per-host, one shard on the first rank of each host (topology.ps.shards is then the number of hosts: across processes by host identity, in virtual time virtual.hosts, in one process 1)"},
    {"topology.ring.bucket_kb", vt::integer, "0", {}, "ring, hierarchical: gradient bucket size in KiB (buckets are allreduced separately); 0: by path, 4096 on the ring of actors (whole buckets lent by reference), 256 through the collective communicator (where smaller buckets sum faster: bench/RESULTS.md)", in(0, 1 << 22)},
    {"topology.ring.chunk_kb", vt::integer, "1024", {}, "ring, hierarchical: largest message in KiB (a bucket's segments are cut into chunks that pipeline)", in(1, 1 << 22)},
    {"topology.ring.sharded_update", vt::boolean, "true", {}, "ring without overlap: each worker applies the optimizer only to the chunks it owns after the reduce-scatter and the ring all-gathers parameters (1/N of the update per worker; the same model)"},
    {"topology.ring.overlap", vt::boolean, "false", {}, "ring, hierarchical: start a bucket's allreduce while backward still runs"},
    {"topology.ring.allreduce", vt::string, "\"auto\"", {"auto", "actors", "collective"},
     "ring, hierarchical across processes: how buckets are summed. collective: the job's communicator (shared-memory sums on a host, TCP lanes or UCX between hosts; what `gradwire bench allreduce` measures), each rank's sum on a thread of its own; actors: ring peers pass chunks as actor messages (re-forms without a lost worker, feels link faults); auto: collective where the ranks span several hosts or the link is TCP alone (transport.tls = \"tcp\": its own TCP lanes), actors on one host otherwise (where lending buffers by reference and the sharded update make the actors' ring the faster: bench/RESULTS.md) or where a ring that re-forms (train.min_workers > 0 with topology.ring.sharded_update = false), transport.rejoin_s, train.restarts or [[faults]] ask for the actors' ring"},
    {"topology.ring.balance_every", vt::integer, "0", {}, "ring, hierarchical: every N steps re-split the global batch (the workers' batches summed) in proportion to each worker's measured speed, so fast workers do not wait for slow ones (0 = fixed batches)", in(0, 1 << 20)},
    {"topology.group_size", vt::integer, "0", {}, "hierarchical, halos: workers per group (consecutive ranks; the last group may be smaller); 0 = by host: across processes the ranks that share a host, whatever each host's count and the placement (as Horovod and NCCL group), in virtual time virtual.workers_per_host, in one process all workers", in(0, 1024)},
    {"topology.gossip.mode", vt::string, "\"dpsgd\"", {"dpsgd", "adpsgd"},
     "gossip: dpsgd = every step average with all graph neighbours (lock step); adpsgd = average with one random neighbour, asynchronously"},
    {"topology.gossip.graph", vt::string, "\"ring\"", {"ring", "torus", "random", "complete", "exponential"},
     "gossip: the communication graph; exponential: D-PSGD with one peer a step, at distance 2^(t mod log2 n) (Ying et al. 2021; a power of 2 of workers, averaging exactly in log2 n steps)"},
    {"topology.gossip.degree", vt::integer, "3", {}, "gossip, random graph: neighbours per worker (at least; a ring keeps it connected)", in(2, 1024)},
    {"topology.gossip.graph_seed", vt::integer, "0", {}, "gossip (D-PSGD) on the random graph: nonzero, a new random graph every step, drawn from (graph_seed, step) alike on every worker, with Metropolis weights on that step's graph; 0: one graph for the run", in(0, std::int64_t{1} << 40)},
    {"topology.gossip.compression", vt::string, "\"choco\"", {"choco", "naive"},
     "gossip (D-PSGD) with compression.kind: choco = CHOCO-SGD, each worker keeps estimates of its neighbours' parameters and sends its own parameters' compressed change against them (converges under any compression); naive = mixes the neighbours' compressed parameters (docs/compression.md)"},
    {"topology.gossip.consensus_lr", vt::number, "0.0", {}, "gossip with compression.kind: the consensus step gamma in x_i += gamma * sum_j w_ij (x^_j - x^_i), in (0, 1]; 0 = by the mode: 2 x compression.ratio for topk and randk, 0.5 for sign, 1 for bf16 (larger steps stall or diverge under strong compression, docs/compression.md)", in(0, 1)},
    {"topology.same_init", vt::boolean, "true", {}, "false: every worker starts from its own random initialisation (seed + rank)"},
  });
}

/// [virtual]: virtual time's compute and link models.
void virtual_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"virtual.step_ms", vt::number, "0.0", {}, "virtual time: a worker's mean compute time per batch in ms (0 = measured once on this machine for the model and batch, and cached)", in(0, 1e7)},
    {"virtual.distribution", vt::string, "\"constant\"", {"constant", "lognormal", "straggler"},
     "virtual time: step times are constant, lognormal (mean step_ms, coefficient of variation cv), or a straggler mixture (straggler_p of steps straggler_k times slower)"},
    {"virtual.cv", vt::number, "0.3", {}, "virtual time, lognormal: the step time's coefficient of variation (std / mean)", in(0, 100)},
    {"virtual.straggler_p", vt::number, "0.1", {}, "virtual time, straggler: the probability that a step is slow", in(0, 1)},
    {"virtual.straggler_k", vt::number, "4.0", {}, "virtual time, straggler: how many times slower a slow step is", in(1, 1e6)},
    {"virtual.replay", vt::string, "\"\"", {}, "virtual time: a real run's metrics.jsonl; each worker replays worker (rank mod its workers)'s recorded step compute times (per metrics window: train.log_every = 1 there gives every step)"},
    {"virtual.hosts", vt::integer, "0", {}, "virtual time: hosts (0 = topology.workers / workers_per_host, rounded up); given, hosts x workers_per_host must equal topology.workers", in(0, 1024)},
    {"virtual.workers_per_host", vt::integer, "0", {}, "virtual time: consecutive ranks per host (0 = every worker on one host, as a real run in one process); links between hosts take transport.latency_us and transport.bandwidth_gbps", in(0, 1024)},
    {"virtual.host_workers", vt::int_list, "[]", {}, "virtual time: workers on each host, consecutive ranks, for hosts of different sizes (e.g. [8, 8, 4]: a node of 4 beside two of 8); the sum must be topology.workers; given, it replaces virtual.hosts and workers_per_host, and a hierarchical ring by host (topology.group_size = 0) groups each host's workers"},
    {"virtual.host_bandwidth_gbps", vt::number_list, "[]", {}, "virtual time: each host's NIC, in Gb/s, by host (as virtual.host_workers or workers_per_host number them; one entry per host): a message between two hosts moves at the slower NIC's rate (a GPU node's 100 Gb/s beside CPU nodes' 10); empty = transport.bandwidth_gbps for every host"},
    {"virtual.threads", vt::integer, "0", {}, "virtual time: threads that compute the workers' gradients, the event loop's included (0 = the machine's cores); a parameter-server worker's gradient computes on one while other events go on, and every bit and event is that of 1 thread", in(0, 1024)},
    {"virtual.cores_per_host", vt::integer, "0", {}, "virtual time: handlers a host runs at once (a computing worker holds its core); one more waits for the first core to free up (0 = no limit: every worker has a processor of its own; 2 models 2+ workers sharing this 2-core machine, as a real run here does)", in(0, 1 << 20)},
    {"virtual.latency_cv", vt::number, "0.0", {}, "virtual time: each message's latency (within or between hosts) is drawn lognormal with this coefficient of variation around its mean, from the seed; one actor's messages to another still arrive in order (0 = every message takes the latency exactly)", in(0, 100)},
    {"virtual.apply_gbps", vt::number, "0.0", {}, "virtual time: how fast a parameter-server shard applies a gradient, in GB/s of gradient (a pull that arrives meanwhile waits for the result); 0 = instantly. A real run's trace.json shows its shards' apply spans", in(0, 1e6)},
    {"virtual.copy_gbps", vt::number, "0.0", {}, "virtual time: how fast an actor copies a message's tensors in before sending it, in GB/s (a worker's gradient into its push, a shard's parameters into each pull's reply; the sender is busy meanwhile); 0 = copies are free", in(0, 1e6)},
    {"virtual.restart_s", vt::number, "2.0", {}, "virtual time, train.restarts: a killed ring worker's new process asks to come back this many virtual seconds after the kill (its start: launch, rendezvous, data), and the ring lets it in as in a real run; a [[faults]] back_at_step brings it back at that step instead", in(1e-6, 1e6)},
    {"virtual.intra_latency_us", vt::number, "0.0", {}, "virtual time: one-way latency of a message within a host (us)", in(0, 1e7)},
    {"virtual.intra_bandwidth_gbps", vt::number, "0.0", {}, "virtual time: bandwidth within a host in Gb/s (0 = unlimited)", in(0, 1e6)},
    {"virtual.nic", vt::boolean, "true", {}, "virtual time: each host has one NIC that sends one message after another and receives one after another (contention; parameter shards on one host feel it)"},

  });
}

/// [[nodes]] and [[faults]].
void nodes_and_faults_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"nodes.name", vt::string, "\"\"", {}, "[[nodes]]: a group of workers: its name (default group<i>)"},
    {"nodes.count", vt::integer, "1", {}, "[[nodes]]: workers in the group (the groups' counts add up to topology.workers)", in(1, 1024)},
    {"nodes.slowdown", vt::number, "1.0", {}, "[[nodes]]: compute-time multiplier emulating a slower node (1 = full speed)", in(1, 1000)},
    {"nodes.batch_size", vt::integer, "0", {}, "[[nodes]]: the group's batch size (0 = train.batch_size)", in(0, 1 << 20)},
    {"nodes.delay_ms", vt::number, "0.0", {}, "[[nodes]]: fixed delay added to every step (ms), e.g. a slow link or a busy node", in(0, 1e6)},
    {"nodes.device", vt::string, "\"\"", {}, "[[nodes]]: the group's device, \"cpu\" or \"cuda:N\" (\"\" = train.device): CPU and GPU workers mix in one job"},
    {"nodes.threads", vt::integer, "0", {}, "[[nodes]]: CPU threads per worker of the group (0 = train.threads)", in(0, 256)},
    {"nodes.jitter_ms", vt::number, "0.0", {}, "[[nodes]]: plus a uniform random delay of 0 .. jitter_ms per step", in(0, 1e6)},
    {"nodes.step_ms", vt::number, "0.0", {}, "[[nodes]]: virtual time: the group's mean step time in ms (0 = virtual.step_ms); slowdown multiplies it", in(0, 1e7)},
    {"nodes.lr_scale", vt::number, "1.0", {},
     "[[nodes]]: multiplies the learning rate of the group's updates: its pushes (async parameter server, SSP) or its own steps (local SGD, gossip); lock-step topologies whose replicas must agree refuse it", in(0, 1000)},
    {"faults.kind", vt::string, "\"kill\"", {"kill", "stall", "slow", "delay", "drop", "partition", "suspend", "nan"},
     "[[faults]]: an injected fault. kill: the rank's process exits abruptly, as SIGKILL leaves it; stall: it stops for `seconds` (SIGSTOP; in one process, the worker's thread sleeps); slow: it computes `factor` times slower for `seconds`; delay: frames on its link to `peer` arrive `delay_ms` later for `seconds`; drop: that link is down for `seconds`; partition: `ranks` and the others cannot reach each other for `seconds`; suspend: after the rank's step, the job's processes on its host stop at once for `seconds` (SIGSTOP, as SLURM's scontrol suspend or Ctrl-Z does), then go on; nan: the rank's next step computes a NaN loss and gradient, as a diverging step would (train.on_nonfinite says what follows). kill, delay, drop and partition need a job across processes (--procs N), but for a kill in virtual time (parameter servers and gossip; not a ring)"},
    {"faults.rank", vt::integer, "-1", {}, "[[faults]]: the worker (process) it strikes (-1: with mtbf_s, drawn each time from `ranks`, or from every rank but 0)"},
    {"faults.ranks", vt::int_list, "[]", {}, "[[faults]]: partition: the ranks cut off from the others; with mtbf_s: the ranks it may strike"},
    {"faults.peer", vt::integer, "-1", {}, "[[faults]]: delay, drop: the other end of the link (-1: every peer of `rank`)"},
    {"faults.at_step", vt::integer, "0", {}, "[[faults]]: when: after the struck worker's step at_step (deterministic; a partition: each rank after its own step at_step)"},
    {"faults.at_seconds", vt::number, "-1.0", {}, "[[faults]]: or when: at the struck worker's first step boundary at_seconds after it started"},
    {"faults.mtbf_s", vt::number, "0.0", {}, "[[faults]]: or again and again, at exponential gaps of this mean (seconds), drawn from experiment.seed"},
    {"faults.mtbf_per_worker", vt::boolean, "false", {}, "[[faults]] with mtbf_s: mtbf_s is each worker's mean time between failures, so the job's gaps shrink with the workers that may be struck (a kill's survivors: fewer of them, longer gaps), as when each node fails on its own; false: mtbf_s is the job's"},
    {"faults.seconds", vt::number, "0.0", {}, "[[faults]]: every kind but kill: how long it lasts"},
    {"faults.factor", vt::number, "1.0", {}, "[[faults]]: slow: the compute-time multiplier (> 1)"},
    {"faults.delay_ms", vt::number, "0.0", {}, "[[faults]]: delay: added to every frame on the link, both ways (ms)"},
    {"faults.back_at_step", vt::integer, "0", {}, "[[faults]]: kill (with train.restarts), stall (with transport.rejoin_s): the worker's new process, or the stalled one, is let back into the ring at this step: the others hold there for it (0: as soon as it asks). In virtual time a killed ring worker's replacement comes back at this step"},
    {"faults.mid_step", vt::boolean, "false", {}, "[[faults]]: stall, suspend with at_step: strike inside the computation of the step after at_step (after its gradients, before an emulated slowdown and the exchange), where a job stopped at a random moment most often is, not after the step"},
  });
}

/// [compression]: what a worker's exchange is compressed to, on every
/// family that compresses (the ring, the parameter-server pushes, gossip).
void compression_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"compression.kind", vt::string, "\"none\"", {"none", "bf16", "topk", "randk", "sign", "int8", "powersgd"},
     "what each worker sends, compressed with error feedback (docs/compression.md): bf16, topk or randk (ratio of the values, with their indices), sign (scaled sign, 1 bit a value), int8 (a byte a value with a scale per block of 256), powersgd (rank-`rank` factors of each weight matrix, ring only). A ring's workers send their payloads to every other and decode them all in rank order (PowerSGD's factors are summed by a ring allreduce); parameter-server, local-SGD and DiLoCo workers push them to the shards, which decode each (local SGD and DiLoCo then push pseudo-gradients)"},
    {"compression.warmup", vt::integer, "0", {}, "ring with compression.kind: the first N steps sum the dense gradient round a ring, then compression starts (error feedback from there). With adam or adamw the optimizer's second moment is frozen at step N, as 1-bit Adam does (Tang et al. 2021): each later update is linear in the gradient, so what error feedback holds back adds up when it is sent (docs/compression.md)", in(0, std::int64_t{1} << 40)},
    {"compression.momentum", vt::boolean, "false", {}, "ring with compression.warmup and adam or adamw: after the warm-up each worker compresses its Adam momentum (with error feedback) instead of its gradient, and the workers' mean momentum makes the step with the frozen second moment: 1-bit Adam (Tang et al. 2021)"},
    {"compression.update", vt::boolean, "false", {}, "ring with compression.kind: each worker takes its own optimizer step (its own Adam state) on its own gradient and compresses that step, the change to its parameters, with error feedback; the workers' mean step is added to every replica. Error feedback then holds back parameter movement rather than gradient, which Adam would rescale (docs/compression.md)"},
    {"compression.ratio", vt::number, "0.01", {}, "topk, randk: the fraction of the gradient's values each worker sends, in (0, 1]", in(0, 1)},
    {"compression.rank", vt::integer, "2", {}, "powersgd: the rank of each weight matrix's factors", in(1, 4096)},
    {"compression.error_feedback", vt::boolean, "true", {}, "error feedback: what compression dropped is kept per worker and added to the next step's gradient (false: dropped, to show what it buys)"},
  });
}

/// [transport].
void transport_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"transport.wire_dtype", vt::string, "\"fp32\"", {"fp32", "bf16", "int8"},
     "the precision of what crosses the wire, rounded without error feedback. ring (bf16): the allreduce's chunks; each hop adds in fp32 and rounds the partial sum it sends (nearest, ties to even), the chunk's owner rounds the final sum once, and every replica gets the same bits; on the workers' own flat ring (not with topology.ring.overlap or compression.kind), with topology.ring.sharded_update off (that passes fp32 parameters). parameter-server, local-sgd, diloco (bf16 or int8 with a scale per block of 256): the pushes, gradients or pseudo-gradients (Streaming DiLoCo's low-precision outer exchange); the pulled parameters stay fp32. Gossip takes compression.kind (docs/compression.md)"},
    {"transport.tls", vt::string, "\"\"", {}, "across processes: UCX transports, e.g. \"posix,cma\" (shared memory) or \"tcp\" (\"\" = UCX_TLS or UCX's choice; with TCP alone frames up to 512 KiB go eagerly)"},
    {"transport.shm_refs", vt::boolean, "true", {}, "across processes on one node: ring chunks, pushed gradients, gossip snapshots and replies (a shard's parameters) travel as references into the sender's shared memory and are read where they lie (no copy); false: every frame is copied"},
    {"transport.spin_us", vt::integer, "0", {}, "across processes: the link busy-polls this long after each event before sleeping (more: lower latency, less CPU for compute)", in(0, 10000000)},
    {"transport.progress_nice", vt::integer, "-1", {}, "across processes: nice value of the link's progress thread, 0-19 (-1: 19 when the workers poll the link while they wait, as when the job's worker threads fit the cores, else 0); at the workers' priority each frame's wake-up preempts one", in(-1, 19)},
    {"transport.peer_timeout_ms", vt::integer, "5000", {}, "across processes: a peer silent this long (no heartbeat) is reported failed, by rank", in(100, 86400000)},
    {"transport.rejoin_s", vt::number, "0.0", {}, "across processes: a rank cut off after a stall or a partition that outlasted peer_timeout_ms (its process alive) asks rank 0 for this long to be let back in; an elastic ring re-forms with it, its state from a live peer (0: it leaves the job at once)", in(0, 86400)},
    {"transport.latency_us", vt::number, "0.0", {}, "link emulation: one-way latency added to every frame between processes (us)", in(0, 1e7)},
    {"transport.bandwidth_gbps", vt::number, "0.0", {}, "link emulation: bandwidth of each link between processes in Gb/s (0 = as the machine gives)", in(0, 1e4)},
  });
}

/// [train]: how a run reports, evaluates, checkpoints and carries on.
void run_keys(std::vector<key_spec>& s) {
  using vt = value_type;
  s.insert(s.end(), {
    {"train.step_timeout_s", vt::number, "60.0", {}, "a worker that reports no finished step this long is cut off: an asynchronous parameter server carries on without it, other topologies fail naming its rank", in(0.1, 86400.0 * 7)},
    {"train.stop_wait_s", vt::number, "60.0", {}, "a run told to stop (it failed or was interrupted) waits this long, or twice train.step_timeout_s where longer, for a computation still running, then gives it up and ends once its results are written", in(0.1, 86400.0 * 7)},
    {"train.log_every", vt::integer, "50", {}, "steps between metrics.jsonl records", in(1, 1 << 30)},
    {"train.eval_every", vt::integer, "1", {}, "epochs between test-set evaluations", in(1, 1 << 30)},
    {"train.eval", vt::string, "\"auto\"", {"auto", "during", "after"},
     "multi-worker runs: evaluate worker 0's snapshots during the run on a thread at the lowest priority (SCHED_IDLE), or after the run; auto: during where the machine has a core beyond the workers' threads. Each result is recorded at the time its snapshot was taken"},
    {"train.eval_steps", vt::integer, "0", {}, "also evaluate every N steps (per worker), for accuracy-against-time curves (0 = only every eval_every epochs)", in(0, std::int64_t{1} << 40)},
    {"train.checkpoint_every_s", vt::number, "0.0", {}, "or write a checkpoint every this many seconds: the workers pause at their next step boundary for one round trip, then all snapshot one common step (0 = none; not with checkpoint_every)", in(0, 1e9)},
    {"train.checkpoint_every", vt::integer, "0", {}, "write a checkpoint every N steps (per worker) under checkpoints/ in the results folder, for `gradwire run --resume DIR` (0 = none; local SGD: a multiple of topology.local_steps)", in(0, std::int64_t{1} << 40)},
    {"train.restarts", vt::integer, "0", {}, "across processes, an elastic ring: worker processes that may be replaced in all. --procs starts a dead worker's process again (GRADWIRE_REJOIN=1; by hand or under srun, start it so yourself), and the ring lets it back in at a step boundary with a live peer's state", in(0, 1 << 20)},
    {"train.min_workers", vt::integer, "1", {}, "a synchronous ring (workers running the ring themselves) that loses a worker's process re-forms without it and goes on while at least this many remain; 0: a lost worker ends the run", in(0, 1024)},
    {"train.keep_checkpoints", vt::integer, "2", {}, "complete checkpoints kept (the newest); older ones are removed once a newer one is written", in(1, 1 << 20)},
  });
}

} // namespace

const std::vector<key_spec>& config_schema() {
  static const std::vector<key_spec> schema = [] {
    std::vector<key_spec> s;
    experiment_keys(s);
    model_and_data_keys(s);
    train_keys(s);
    topology_keys(s);
    virtual_keys(s);
    nodes_and_faults_keys(s);
    compression_keys(s);
    transport_keys(s);
    run_keys(s);
    return s;
  }();
  return schema;
}

const key_spec* find_key(const std::string& key) {
  for (const auto& k : config_schema())
    if (k.key == key)
      return &k;
  return nullptr;
}

std::string shown_value(double x, value_type t) {
  if (t == value_type::integer || t == value_type::int_list) {
    if (x >= 9.2e18)
      return std::to_string(std::numeric_limits<std::int64_t>::max());
    return std::to_string(static_cast<std::int64_t>(x));
  }
  std::ostringstream os;
  os << x;
  return os.str();
}

std::string to_string(value_type t) {
  switch (t) {
  case value_type::string: return "a string";
  case value_type::integer: return "an integer";
  case value_type::number: return "a number";
  case value_type::boolean: return "true or false";
  case value_type::int_list: return "a list of integers";
  case value_type::number_list: return "a list of numbers";
  }
  return "?";
}

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

} // namespace

std::string nearest_of(const std::string& value, const std::vector<std::string>& options) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(3, value.size() / 2) + 1;
  for (const auto& o : options) {
    auto d = edit_distance(value, o);
    // A key whose last part matches exactly is a strong hint ("lr" -> "train.lr").
    auto dot = o.rfind('.');
    if (dot != std::string::npos && value.size() > 0 && o.substr(dot + 1) == value.substr(value.rfind('.') + 1))
      d = std::min<std::size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = o;
    }
  }
  return best;
}

std::string nearest_key(const std::string& key) {
  // Names other tools use for the same setting.
  static const std::vector<std::pair<std::string, std::string>> aliases = {
    {"learning_rate", "lr"}, {"lr_rate", "lr"}, {"num_epochs", "epochs"}, {"n_epochs", "epochs"},
    {"batchsize", "batch_size"}, {"bs", "batch_size"}, {"seed", "seed"}, {"num_threads", "threads"},
    {"optim", "optimizer"}, {"wd", "weight_decay"}, {"model", "kind"}, {"arch", "kind"}};
  const auto dot = key.rfind('.');
  const std::string leaf = dot == std::string::npos ? key : key.substr(dot + 1);
  for (const auto& [alias, real] : aliases)
    if (leaf == alias)
      for (const auto& k : config_schema())
        if (k.key.size() > real.size() && k.key.compare(k.key.size() - real.size() - 1, std::string::npos, "." + real) == 0)
          return k.key;
  std::vector<std::string> keys;
  for (const auto& k : config_schema())
    keys.push_back(k.key);
  return nearest_of(key, keys);
}

} // namespace gradwire::scheduler
