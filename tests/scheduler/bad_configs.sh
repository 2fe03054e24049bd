#!/usr/bin/env bash
# The config corpus: bad configs and invocations, each of which must end
# with exit status 2 (no crash, no hang) and an error that says what and
# where: the file and line, or the --set argument, and the key.
#   bad_configs.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$(realpath "${1:?usage: bad_configs.sh GRADWIRE SOURCE_DIR}")
src=${2:?usage: bad_configs.sh GRADWIRE SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
n=0 failed=0

# case NAME 'TOML' 'EXPECTED (extended regex)' [extra gradwire run args...]
case_() {
  local name=$1 toml=$2 want=$3
  shift 3
  n=$((n + 1))
  printf '%b' "$toml" > "$name.toml"
  local rc=0
  timeout 60 "$gw" run "$name.toml" -q --no-report --out "$tmp/out-$name" "$@" > "$name.txt" 2>&1 || rc=$?
  if [[ $rc -ne 2 ]] || ! grep -qE -- "$want" "$name.txt"; then
    echo "FAIL $name: exit $rc (want 2), output:" >&2
    sed 's/^/    /' "$name.txt" >&2
    echo "    expected: $want" >&2
    failed=$((failed + 1))
  fi
}
# inv NAME 'EXPECTED' gradwire args... (an invocation without a config of its own)
inv() {
  local name=$1 want=$2
  shift 2
  n=$((n + 1))
  local rc=0
  timeout 60 "$gw" "$@" > "$name.txt" 2>&1 || rc=$?
  if [[ $rc -ne 2 ]] || ! grep -qE -- "$want" "$name.txt"; then
    echo "FAIL $name: exit $rc (want 2), output:" >&2
    sed 's/^/    /' "$name.txt" >&2
    echo "    expected: $want" >&2
    failed=$((failed + 1))
  fi
}

# TOML syntax and structure
case_ syntax '[train\nlr = 0.1\n' 'syntax.toml:1.*TOML syntax error'
case_ syntax2 '[train]\nlr = = 0.1\n' 'syntax2.toml:2.*TOML syntax error'
case_ unterminated '[experiment]\nname = "x\n' 'unterminated.toml:2.*TOML syntax error'
case_ dupkey '[train]\nlr = 0.1\nlr = 0.2\n' 'dupkey.toml:3.*TOML syntax error'
case_ unknown_section '[trian]\nlr = 0.1\n' "unknown_section.toml:1.*unknown section \[trian\].*did you mean \[train\]"
case_ unknown_key '[train]\nlearning_rate = 0.1\n' "unknown_key.toml:2.*unknown key 'train.learning_rate'.*did you mean 'train.lr'"
case_ unknown_top 'lr = 0.1\n' "unknown_top.toml:1.*unknown key 'lr'"
case_ nodes_table '[nodes]\ncount = 2\n' 'nodes_table.toml:1.*write \[\[nodes\]\]'
case_ nodes_unknown '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncont = 2\n' "nodes_unknown.toml:5.*unknown key 'nodes.cont'"
# types
case_ type_lr '[train]\nlr = "fast"\n' 'type_lr.toml:2.*train.lr must be'
case_ type_epochs '[train]\nepochs = 1.5\n' 'type_epochs.toml:2.*train.epochs must be'
case_ type_threads '[train]\nthreads = "2"\n' 'type_threads.toml:2.*train.threads must be'
case_ type_bool '[train]\nnesterov = 1\n' 'type_bool.toml:2.*train.nesterov must be'
case_ type_hidden '[model]\nhidden = [256, "x"]\n' 'type_hidden.toml:2.*model.hidden must be'
case_ type_hidden2 '[model]\nhidden = 256\n' 'type_hidden2.toml:2.*model.hidden must be'
case_ type_name '[experiment]\nname = 3\n' 'type_name.toml:2.*experiment.name must be'
case_ type_workers '[topology]\nworkers = true\n' 'type_workers.toml:2.*topology.workers must be'
case_ type_tls '[transport]\ntls = 1\n' 'type_tls.toml:2.*transport.tls must be'
case_ type_seed '[experiment]\nseed = "one"\n' 'type_seed.toml:2.*experiment.seed must be'
# allowed values
case_ enum_kind '[topology]\nkind = "rign"\n' 'enum_kind.toml:2.*topology.kind = "rign" is not one of.*did you mean "ring"'
case_ enum_mode '[topology]\nkind = "parameter-server"\nmode = "asinc"\n' 'enum_mode.toml:3.*did you mean "async"'
case_ enum_model '[model]\nkind = "lenet"\n' 'enum_model.toml:2.*model.kind = "lenet" is not one of'
case_ enum_optimizer '[train]\noptimizer = "sdg"\n' 'enum_optimizer.toml:2.*did you mean "sgd"'
case_ enum_dataset '[data]\ndataset = "fashion"\n' 'enum_dataset.toml:2.*data.dataset'
case_ enum_gossip '[topology]\nkind = "gossip"\ngossip = "pdsgd"\n' 'enum_gossip.toml:3.*topology.gossip.mode'
case_ enum_graph '[topology]\nkind = "gossip"\ngraph = "star"\n' 'enum_graph.toml:3.*topology.gossip.graph'
case_ enum_parallelism '[train]\nparallelism = "model"\n' 'enum_parallelism.toml:2.*train.parallelism'
case_ enum_placement '[topology]\nshard_placement = "everywhere"\n' 'enum_placement.toml:2.*topology.ps.shard_placement'
case_ enum_if_missing '[data]\nif_missing = "ignore"\n' 'enum_if_missing.toml:2.*data.if_missing'
# ranges
case_ lr_zero '[train]\nlr = 0.0\n' 'lr_zero.toml:2: train.lr = 0 is out of range.*greater than 0'
case_ lr_negative '[train]\nlr = -0.1\n' 'lr_negative.toml:2: train.lr = -0.1 is out of range'
case_ lr_huge '[train]\nlr = 1e9\n' 'lr_huge.toml:2: train.lr = 1e\+09 is out of range'
case_ momentum '[train]\nmomentum = 1.0\n' 'momentum.toml:2: train.momentum = 1 is out of range'
case_ weight_decay '[train]\nweight_decay = 2.0\n' 'weight_decay.toml:2: train.weight_decay'
case_ epochs_zero '[train]\nepochs = 0\n' 'epochs_zero.toml:2: train.epochs = 0 is out of range'
case_ epochs_negative '[train]\nepochs = -3\n' 'epochs_negative.toml:2: train.epochs = -3'
case_ batch_zero '[train]\nbatch_size = 0\n' 'batch_zero.toml:2: train.batch_size = 0'
case_ batch_huge '[train]\nbatch_size = 4294967298\n' 'batch_huge.toml:2: train.batch_size = 4294967298 is out of range'
case_ threads_zero '[train]\nthreads = 0\n' 'threads_zero.toml:2: train.threads = 0'
case_ threads_huge '[train]\nthreads = 100000\n' 'threads_huge.toml:2: train.threads = 100000'
case_ max_steps '[train]\nmax_steps = -1\n' 'max_steps.toml:2: train.max_steps = -1'
case_ log_every '[train]\nlog_every = 0\n' 'log_every.toml:2: train.log_every = 0'
case_ eval_every '[train]\neval_every = 0\n' 'eval_every.toml:2: train.eval_every = 0'
case_ target '[train]\ntarget_accuracy = 1.5\n' 'target.toml:2: train.target_accuracy = 1.5'
case_ workers_zero '[topology]\nkind = "ring"\nworkers = 0\n' 'workers_zero.toml:3: topology.workers = 0'
case_ workers_huge '[topology]\nkind = "ring"\nworkers = 5000\n' 'workers_huge.toml:3: topology.workers = 5000'
case_ shards_zero '[topology]\nkind = "parameter-server"\nshards = 0\n' 'shards_zero.toml:3: topology.ps.shards = 0'
case_ local_steps '[topology]\nkind = "local-sgd"\nlocal_steps = 0\n' 'local_steps.toml:3: topology.local_steps = 0'
case_ bound '[topology]\nkind = "parameter-server"\nmode = "ssp"\nstaleness_bound = -1\n' 'bound.toml:4: topology.ps.staleness_bound = -1'
case_ backups '[topology]\nkind = "parameter-server"\nworkers = 2\nbackup_workers = 2\n' 'backups.toml:4: topology.ps.backup_workers: 2 backup workers'
case_ dc_lambda '[topology]\nkind = "parameter-server"\nmode = "async"\ndc_lambda = -1.0\n' 'dc_lambda.toml:4: topology.ps.dc_lambda = -1'
case_ bucket '[topology]\nkind = "ring"\nbucket_kb = -1\n' 'bucket.toml:3: topology.ring.bucket_kb = -1'
case_ chunk '[topology]\nkind = "ring"\nchunk_kb = 0\n' 'chunk.toml:3: topology.ring.chunk_kb = 0'
# language models
case_ gpt_heads '[model]\nkind = "gpt"\nheads = 3\nd_model = 128\n[data]\ndataset = "text"\n' 'gpt_heads.toml:3: model.heads = 3 does not divide model.d_model = 128'
case_ gpt_images '[model]\nkind = "gpt"\n' 'gpt_images.toml.*model.kind = "gpt" trains on data.dataset = "text" or "tokens", and only it does'
case_ text_mlp '[data]\ndataset = "text"\n' 'text_mlp.toml.*model.kind = "gpt" trains on data.dataset = "text"'
case_ tokens_nopath '[model]\nkind = "gpt"\n[data]\ndataset = "tokens"\n' 'tokens_nopath.toml.*data.dataset = "tokens" needs data.path'
case_ torch_nomodule '[model]\nkind = "torch"\n' 'torch_nomodule.toml.*model.kind = "torch" needs model.module'
case_ torch_missing '[model]\nkind = "torch"\nmodule = "nowhere.py"\n' 'torch_missing.toml:3: model.module: .*/nowhere.py does not exist'
case_ torch_args_mlp '[model]\nkind = "mlp"\n[model.args]\nwidth = 3\n' 'torch_args_mlp.toml.*\[model.args\] is handed to a torch module'
case_ torch_module_mlp '[model]\nmodule = "x.py"\n' 'torch_module_mlp.toml:2: model.module: a module file is for model.kind = "torch"'
case_ torch_args_value '[model]\nkind = "torch"\nargs = 5\n' 'torch_args_value.toml:3: model.args is a table'
case_ module_data_mlp '[model]\nkind = "mlp"\n[data]\ndataset = "module"\n' 'module_data_mlp.toml:4: data.dataset: data.dataset = "module" is a torch module'
printf 'too short for a window\n' > short.txt
case_ gpt_short "[model]\nkind = \"gpt\"\ncontext = 64\n[data]\ndataset = \"text\"\npath = \"$PWD/short.txt\"\n" 'short.txt" holds 23 bytes of text.*model.context \+ 1 = 65'
case_ gpt_missing '[model]\nkind = "gpt"\n[data]\ndataset = "text"\npath = "/nonexistent/corpus"\n' 'data.path = "/nonexistent/corpus" does not exist'
case_ betas '[train]\noptimizer = "adamw"\nbetas = [0.9]\n' 'betas.toml:3: train.betas: two numbers expected'
case_ betas_range '[train]\nbetas = [0.9, 1.0]\n' 'betas_range.toml:2: train.betas: each beta must be in \[0, 1\)'
case_ accumulate '[train]\nbatch_size = 4\naccumulate = 8\n' 'accumulate.toml:3: train.accumulate: 8 micro-batches of a batch of 4'
case_ outer_momentum '[topology]\nkind = "diloco"\nouter_momentum = 1.0\n' 'outer_momentum.toml:3: topology.diloco.outer_momentum = 1'
case_ outer_lr '[topology]\nkind = "diloco"\nouter_lr = 0\n' 'outer_lr.toml:3: topology.diloco.outer_lr = 0'
# A family's key under its flat name of the release before: read, and the warning names the new key.
case_ flat_key '[topology]\nkind = "diloco"\nouter_lr = 0\n' 'flat_key.toml:3: topology.outer_lr is now topology.diloco.outer_lr'
case_ flat_set '[topology]\nkind = "diloco"\n' '--set topology.sync_delay=2: topology.sync_delay is now topology.streaming.sync_delay' --set topology.sync_delay=2
case_ key_twice '[topology]\nouter_lr = 0.5\n[topology.diloco]\nouter_lr = 0.6\n' 'key_twice.toml:2: topology.outer_lr and topology.diloco.outer_lr \(key_twice.toml:4\) are one key, given twice'
case_ diloco_ssp '[topology]\nkind = "diloco"\nmode = "ssp"\n' 'diloco_ssp.toml:3: topology.ps.mode = "ssp": DiLoCo runs "sync"'
case_ text_dirichlet '[model]\nkind = "gpt"\n[data]\ndataset = "text"\npartition = "dirichlet"\n' 'text_dirichlet.toml:5: data.partition = "dirichlet" splits by class label; text windows have none'
case_ images_contiguous '[data]\npartition = "contiguous"\n' 'images_contiguous.toml:2: data.partition = "contiguous" gives each worker its own stretch of a text corpus'
case_ compress_ratio0 '[topology]\nkind = "ring"\n[transport]\ncompress = "topk"\ncompress_ratio = 0\n' 'compress_ratio0.toml:5: compression.ratio = 0 sends nothing'
case_ compress_ratio2 '[topology]\nkind = "ring"\n[transport]\ncompress = "topk"\ncompress_ratio = 1.5\n' 'compress_ratio2.toml:5: compression.ratio'
case_ compress_rank0 '[topology]\nkind = "ring"\n[transport]\ncompress = "powersgd"\ncompress_rank = 0\n' 'compress_rank0.toml:5: compression.rank'
case_ compress_mode '[topology]\nkind = "ring"\n[transport]\ncompress = "zip"\n' 'compress_mode.toml:4: compression.kind'
case_ compress_hier '[topology]\nkind = "hierarchical"\n[transport]\ncompress = "topk"\n' 'compress_hier.toml:4: compression.kind: compression.kind = "topk" compresses a ring.s gradients, the pushes to parameter-server shards or gossip.s parameters; topology.kind = "hierarchical" exchanges dense fp32'
case_ compress_adpsgd '[topology]\nkind = "gossip"\ngossip = "adpsgd"\n[transport]\ncompress = "sign"\n' 'compress_adpsgd.toml:5: compression.kind: .*use topology.gossip.mode = "dpsgd"'
case_ compress_expgraph '[topology]\nkind = "gossip"\ngraph = "exponential"\nworkers = 4\n[transport]\ncompress = "sign"\n' 'compress_expgraph.toml:6: compression.kind: .*needs a fixed graph'
case_ graph_seed_ring '[topology]\nkind = "gossip"\ngraph = "ring"\ngraph_seed = 3\n' 'graph_seed_ring.toml:4: topology.gossip.graph_seed: graphs redrawn every step are D-PSGD.s on topology.gossip.graph = "random"'
case_ outer_delay_sync '[topology]\nkind = "diloco"\nouter_delay = 4\n' 'outer_delay_sync.toml:3: topology.diloco.outer_delay = 4: delayed Nesterov is async DiLoCo.s'
case_ wire_gossip '[topology]\nkind = "gossip"\n[transport]\nwire_dtype = "bf16"\n' 'wire_gossip.toml:4: transport.wire_dtype = "bf16": low precision on the wire is a ring.s chunks or the pushes to shards'
case_ wire_ring_int8 '[topology]\nkind = "ring"\n[transport]\nwire_dtype = "int8"\n' 'wire_ring_int8.toml:4: transport.wire_dtype = "int8": a ring.s chunks cross as bf16 or fp32'
case_ wire_ps_compress '[topology]\nkind = "diloco"\n[transport]\nwire_dtype = "int8"\ncompress = "topk"\n' 'wire_ps_compress.toml:4: transport.wire_dtype = "int8": compression.kind sets the pushes. payload too'
case_ wire_compress '[topology]\nkind = "ring"\n[transport]\nwire_dtype = "bf16"\ncompress = "topk"\n' 'wire_compress.toml:4: transport.wire_dtype = "bf16": a compressed ring'
case_ wire_overlap '[topology]\nkind = "ring"\noverlap = true\n[transport]\nwire_dtype = "bf16"\n' 'wire_overlap.toml:5: transport.wire_dtype = "bf16": .*set topology.ring.overlap = false'
case_ wire_collective '[topology]\nkind = "ring"\nallreduce = "collective"\n[transport]\nwire_dtype = "bf16"\n' 'wire_collective.toml:3: topology.ring.allreduce = "collective" cannot serve transport.wire_dtype = "bf16"'
case_ wire_dtype '[transport]\nwire_dtype = "fp8"\n' 'wire_dtype.toml:2: transport.wire_dtype = "fp8" is not one of: fp32, bf16, int8'
case_ warmup_alone '[topology]\nkind = "ring"\n[transport]\ncompress_warmup = 10\n' 'warmup_alone.toml:4: compression.warmup = 10: a warm-up before compression needs compression.kind'
case_ warmup_ps '[topology]\nkind = "parameter-server"\n[transport]\ncompress = "topk"\ncompress_warmup = 10\n' 'warmup_ps.toml:5: compression.warmup: the dense warm-up is a ring.s'
case_ update_alone '[topology]\nkind = "ring"\n[transport]\ncompress_update = true\n' 'update_alone.toml:4: compression.update: compressing each worker.s own optimizer step needs compression.kind'
case_ update_ps '[topology]\nkind = "parameter-server"\n[transport]\ncompress = "topk"\ncompress_update = true\n' 'update_ps.toml:5: compression.update: each worker.s own step goes round a ring'
case_ momentum_sgd '[topology]\nkind = "ring"\n[transport]\ncompress = "sign"\ncompress_warmup = 8\ncompress_momentum = true\n' 'momentum_sgd.toml:6: compression.momentum: 1-bit Adam compresses Adam.s momentum after a dense warm-up'
case_ dylu_sync '[topology]\nkind = "diloco"\ndynamic_local_steps = true\n' 'dylu_sync.toml:3: topology.diloco.dynamic_local_steps: dynamic local steps are async DiLoCo.s .*not diloco sync'
case_ dylu_ps '[topology]\nkind = "parameter-server"\nmode = "async"\ndynamic_local_steps = true\n' 'dylu_ps.toml:4: topology.diloco.dynamic_local_steps: dynamic local steps are async DiLoCo.s'
case_ dylu_ckpt '[topology]\nkind = "diloco"\nmode = "async"\ndynamic_local_steps = true\n[train]\ncheckpoint_every = 8\n' 'dylu_ckpt.toml:4: topology.diloco.dynamic_local_steps: dynamic local steps do not checkpoint'
case_ delay_alone '[topology]\nkind = "diloco"\nsync_delay = 2\n' 'delay_alone.toml:3: topology.streaming.sync_delay = 2 overlaps a streaming exchange: set topology.streaming.fragments'
case_ fragments_async '[topology]\nkind = "diloco"\nmode = "async"\nfragments = 2\n' 'fragments_async.toml:4: topology.streaming.fragments: streaming exchanges fragments of local SGD or DiLoCo in lock step'
case_ fragments_ps '[topology]\nkind = "parameter-server"\nfragments = 2\n' 'fragments_ps.toml:3: topology.streaming.fragments: streaming'
case_ fragments_tensors '[topology]\nkind = "diloco"\nlocal_steps = 64\nfragments = 7\n' 'fragments_tensors.toml:4: topology.streaming.fragments = 7: a fragment holds whole tensors, and the model has 6'
case_ fragments_h '[topology]\nkind = "diloco"\nlocal_steps = 2\nfragments = 3\n' 'fragments_h.toml:4: topology.streaming.fragments = 3: each fragment is exchanged once every topology.local_steps = 2'
case_ delay_h '[topology]\nkind = "diloco"\nlocal_steps = 8\nfragments = 4\nsync_delay = 2\n' 'delay_h.toml:5: topology.streaming.sync_delay = 2: .*within local_steps / fragments = 2'
case_ fragments_ckpt '[topology]\nkind = "diloco"\nfragments = 2\n[train]\ncheckpoint_every = 8\n' 'fragments_ckpt.toml:3: topology.streaming.fragments: streaming does not checkpoint'
case_ consensus_lr '[topology]\nkind = "gossip"\nconsensus_lr = 1.5\n' 'consensus_lr.toml:3: topology.gossip.consensus_lr'
case_ compress_ps_powersgd '[topology]\nkind = "parameter-server"\n[transport]\ncompress = "powersgd"\n' 'compress_ps_powersgd.toml:4: compression.kind: compression.kind = "powersgd" needs the workers. factors summed.*takes bf16, topk, randk, sign or int8'
case_ compress_balance '[topology]\nkind = "ring"\nbalance_every = 10\n[transport]\ncompress = "sign"\n' 'compress_balance.toml:5: compression.kind: .*does not balance'
case_ alpha '[data]\npartition = "dirichlet"\ndirichlet_alpha = 0\n' 'alpha.toml:3: data.dirichlet_alpha = 0'
case_ classes_zero '[data]\npartition = "classes"\nclasses_per_worker = 0\n' 'classes_zero.toml:3: data.classes_per_worker = 0'
case_ text_classes '[model]\nkind = "gpt"\n[data]\ndataset = "text"\npartition = "classes"\n' 'text_classes.toml:5: data.partition = "classes" splits by class label'
case_ exp_workers '[topology]\nkind = "gossip"\nworkers = 6\ngraph = "exponential"\n' 'exp_workers.toml:4: topology.gossip.graph = "exponential" needs a power of 2 of workers, and topology.workers = 6'
case_ exp_adpsgd '[topology]\nkind = "gossip"\nworkers = 4\ngossip = "adpsgd"\ngraph = "exponential"\n' 'exp_adpsgd.toml:5: topology.gossip.graph = "exponential" is D-PSGD.s one-peer schedule'
case_ warmup_both '[train]\nwarmup_steps = 10\nwarmup_epochs = 1\n' 'warmup_both.toml:2: train.warmup_steps: give warmup_epochs or warmup_steps, not both'
case_ group_size '[topology]\nkind = "hierarchical"\ngroup_size = -1\n' 'group_size.toml:3: topology.group_size = -1'
case_ degree '[topology]\nkind = "gossip"\ndegree = 1\n' 'degree.toml:3: topology.gossip.degree = 1'
case_ balance_ps '[topology]\nkind = "parameter-server"\nbalance_every = 10\n' 'balance_ps.toml:3: topology.ring.balance_every.*not parameter-server'
case_ spin '[transport]\nspin_us = -5\n' 'spin.toml:2: transport.spin_us = -5'
case_ nice '[transport]\nprogress_nice = 20\n' 'nice.toml:2: transport.progress_nice = 20'
case_ peer_timeout '[transport]\npeer_timeout_ms = 1\n' 'peer_timeout.toml:2: transport.peer_timeout_ms = 1'
case_ step_timeout '[train]\nstep_timeout_s = 0.0\n' 'step_timeout.toml:2: train.step_timeout_s = 0'
case_ stop_wait '[train]\nstop_wait_s = -1.0\n' 'stop_wait.toml:2: train.stop_wait_s = -1'
case_ latency '[transport]\nlatency_us = -1.0\n' 'latency.toml:2: transport.latency_us = -1'
case_ hidden_zero '[model]\nhidden = [256, 0]\n' 'hidden_zero.toml:2: model.hidden: widths must be in'
case_ trace_spans '[experiment]\ntrace_spans = 0\n' 'trace_spans.toml:2: experiment.trace_spans = 0'
case_ train_subset '[data]\ntrain_subset = -5\n' 'train_subset.toml:2: data.train_subset = -5'
case_ synthetic_train '[data]\nsynthetic_train = 0\n' 'synthetic_train.toml:2: data.synthetic_train = 0'
# names and devices
case_ name_empty '[experiment]\nname = ""\n' 'name_empty.toml:2: experiment.name = "" must be a plain name'
case_ name_slash '[experiment]\nname = "../x"\n' 'name_slash.toml:2: experiment.name = "../x" must be a plain name'
case_ name_dotdot '[experiment]\nname = ".."\n' 'name_dotdot.toml:2: experiment.name = ".." must be a plain name'
case_ device_bad '[train]\ndevice = "tpu"\n' 'device_bad.toml:2: train.device'
case_ device_gpu_missing '[train]\ndevice = "cuda:7"\n' 'device_gpu_missing.toml:2: train.device = "cuda:7".*(CUDA device\(s\) are visible|built without CUDA)'
case_ dropout_one '[model]\nkind = "gpt"\ndropout = 1.0\n[data]\ndataset = "text"\n' 'dropout_one.toml:3: model.dropout = 1 drops everything'
case_ dropout_mlp '[model]\ndropout = 0.1\n' 'dropout_mlp.toml:2: model.dropout: dropout is the GPT.s'
case_ dropout_negative '[model]\nkind = "gpt"\ndropout = -0.1\n[data]\ndataset = "text"\n' 'dropout_negative.toml:3: model.dropout = -0.1 is out of range'
case_ precision_bad '[train]\nprecision = "fp16"\n' 'precision_bad.toml:2: train.precision = "fp16"'
case_ precision_cpu '[train]\nprecision = "bf16"\n' 'precision_cpu.toml:2: train.precision = "bf16" computes on a GPU.*train.device.* = "cpu"'
case_ precision_node_cpu '[topology]\nkind = "ring"\nworkers = 2\n[train]\ndevice = "cuda:0"\nprecision = "bf16"\n[[nodes]]\ncount = 1\n[[nodes]]\ncount = 1\ndevice = "cpu"\n' "precision_node_cpu.toml:6: train.precision = \"bf16\".*nodes\\]\\] #2 \\(group 'group1'\\) runs on \"cpu\""
# [[nodes]]
case_ nodes_count_huge '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 4294967298\n' 'nodes_count_huge.toml:5: nodes.count = 4294967298 is out of range \[1, 1024\]'
case_ nodes_count_zero '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 0\n' 'nodes_count_zero.toml:5: nodes.count = 0 is out of range'
case_ nodes_total '[topology]\nkind = "ring"\nworkers = 3\n[[nodes]]\ncount = 2\n' 'nodes_total.toml: the \[\[nodes\]\] groups describe 2 worker\(s\) but topology.workers = 3'
case_ nodes_single '[[nodes]]\ncount = 2\n' 'nodes_single.toml.*needs several workers|nodes_single.toml.*describe 2 worker'
case_ nodes_slowdown '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 2\nslowdown = 0.5\n' 'nodes_slowdown.toml:6: nodes.slowdown = 0.5 is out of range \[1, 1000\]'
case_ nodes_lr_ring '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 2\nlr_scale = 0.5\n' 'nodes_lr_ring.toml:4: \[\[nodes\]\] #1 .group .group0..: lr_scale works where a worker.s updates are its own'
case_ nodes_lr_range '[topology]\nkind = "gossip"\nworkers = 2\n[[nodes]]\ncount = 2\nlr_scale = -1.0\n' 'nodes_lr_range.toml:6: nodes.lr_scale = -1 is out of range \[0, 1000\]'
case_ nodes_threads '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 2\nthreads = -1\n' 'nodes_threads.toml:6: nodes.threads = -1 is out of range \[0, 256\]'
case_ nodes_delay '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 2\ndelay_ms = -3.0\n' 'nodes_delay.toml:6: nodes.delay_ms = -3 is out of range'
case_ nodes_batch '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 2\nbatch_size = -64\n' 'nodes_batch.toml:6: nodes.batch_size = -64 is out of range \[0, 1048576\]'
case_ nodes_device '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\ncount = 2\ndevice = "gpu0"\n' 'nodes_device.toml:4: \[\[nodes\]\] #1: device'
case_ nodes_not_table 'nodes = [1, 2]\n' 'nodes_not_table.toml:1.*\[\[nodes\]\] entries must be tables'
# [[faults]]
case_ faults_table '[faults]\nkind = "kill"\n' 'faults_table.toml:1.*write \[\[faults\]\]'
case_ faults_kind '[topology]\nkind = "ring"\n[[faults]]\nkind = "crash"\n' 'faults_kind.toml:4.*faults.kind = "crash" is not one of'
case_ faults_rank '[topology]\nkind = "ring"\nworkers = 2\n[[faults]]\nrank = 2\nat_step = 5\n' 'faults_rank.toml:4: \[\[faults\]\] #1: rank = 2, but the workers are ranks 0 to 1'
case_ faults_step '[topology]\nkind = "ring"\n[[faults]]\nat_step = 0\n' 'faults_step.toml:3: \[\[faults\]\] #1: at_step = 0 must be 1 or more'
case_ faults_single '[[faults]]\nrank = 0\n' 'faults_single.toml:1: \[\[faults\]\] #1: a kill fault needs a topology of several workers'
case_ faults_in_process '[topology]\nkind = "ring"\n[[faults]]\nrank = 1\nat_step = 3\n' 'kills a worker.s process, and in one process the whole run would end: run the job across processes'
case_ faults_when '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nrank = 1\n' 'faults_when.toml:4: \[\[faults\]\] #1: say when, with exactly one of at_step'
case_ faults_whens '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nrank = 1\nat_step = 3\nat_seconds = 1.0\n' 'faults_whens.toml:4: .*exactly one of at_step.*(it gives 2)'
case_ faults_norank '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nat_step = 3\n' 'faults_norank.toml:4: .*rank = the worker it strikes .0 to 2.'
case_ faults_suspend_rank '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "suspend"\nat_step = 3\nseconds = 1.0\n' 'faults_suspend_rank.toml:4: .*rank = the worker it strikes .0 to 2.'
case_ faults_suspend_peer '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "suspend"\nrank = 1\npeer = 2\nat_step = 3\nseconds = 1.0\n' 'faults_suspend_peer.toml:4: .*peer does not apply to kind = "suspend"'
case_ faults_suspend_seconds '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "suspend"\nrank = 1\nat_step = 3\n' 'faults_suspend_seconds.toml:4: .*seconds = how long the suspend lasts, more than 0'
case_ faults_kill_ring_virtual '[experiment]\nclock = "virtual"\n[topology]\nkind = "hierarchical"\nworkers = 4\ngroup_size = 2\n[[faults]]\nkind = "kill"\nrank = 1\nat_step = 3\n' 'faults_kill_ring_virtual.toml:7: .*faults.* #1: kind = "kill" in virtual time: hierarchical does not re-form without a lost worker'
case_ faults_kill_back_virtual '[experiment]\nclock = "virtual"\n[topology]\nkind = "parameter-server"\nmode = "async"\nworkers = 3\n[[faults]]\nkind = "kill"\nrank = 1\nat_step = 3\nback_at_step = 6\n' 'kind = "kill" in virtual time: back_at_step: only an elastic ring lets a killed worker back in'
case_ faults_mtbf_per_worker_alone '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "kill"\nrank = 1\nat_step = 3\nmtbf_per_worker = true\n' 'faults_mtbf_per_worker_alone.toml:4: .*faults.* #1: mtbf_per_worker makes mtbf_s each struck worker.s: give mtbf_s'
case_ faults_seconds '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "stall"\nrank = 1\nat_step = 3\n' 'faults_seconds.toml:4: .*seconds = how long the stall lasts'
case_ faults_factor '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "slow"\nrank = 1\nat_step = 3\nseconds = 1.0\nfactor = 0.5\n' 'faults_factor.toml:4: .*factor = how many times slower, more than 1'
case_ faults_delay '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "delay"\nrank = 1\nat_step = 3\nseconds = 1.0\n' 'faults_delay.toml:4: .*delay_ms = the delay added to every frame'
case_ faults_key_kind '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nrank = 1\nat_step = 3\nseconds = 2.0\n' 'faults_key_kind.toml:4: .*seconds does not apply to kind = "kill"'
case_ faults_part_all '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "partition"\nranks = [0, 1, 2]\nat_step = 3\nseconds = 1.0\n' 'faults_part_all.toml:4: .*ranks = the workers cut off from the others: 1 to 2 of them'
case_ faults_part_rank '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "partition"\nrank = 1\nat_step = 3\nseconds = 1.0\n' 'faults_part_rank.toml:4: .*give ranks = \[...\], not rank'
case_ faults_peer_self '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "drop"\nrank = 1\npeer = 1\nat_step = 3\nseconds = 1.0\n' 'faults_peer_self.toml:4: .*peer = 1 is the struck rank itself'
case_ faults_peer_range '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "drop"\nrank = 1\npeer = 7\nat_step = 3\nseconds = 1.0\n' 'faults_peer_range.toml:4: .*peer = 7, but the workers are ranks 0 to 2'
case_ faults_ranks_dup '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nmtbf_s = 10.0\nranks = [1, 1]\n' 'faults_ranks_dup.toml:4: .*ranks names rank 1 twice'
case_ faults_mtbf '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nrank = 1\nmtbf_s = 0.0\n' 'faults_mtbf.toml:4: .*mtbf_s must be more than 0'
case_ faults_back_kind '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "slow"\nrank = 1\nat_step = 3\nseconds = 1.0\nfactor = 2.0\nback_at_step = 9\n' 'faults_back_kind.toml:4: .*back_at_step applies to kind = "kill" .a new process. and "stall" only'
case_ faults_mid_kind '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "slow"\nrank = 1\nat_step = 3\nseconds = 1.0\nfactor = 2.0\nmid_step = true\n' 'faults_mid_kind.toml:4: .*mid_step applies to kind = "stall" and "suspend" only'
case_ faults_mid_when '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "stall"\nrank = 1\nat_seconds = 3.0\nseconds = 1.0\nmid_step = true\n' 'faults_mid_when.toml:4: .*mid_step strikes inside the step after at_step: give at_step'
case_ faults_mid_type '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nkind = "stall"\nrank = 1\nat_step = 3\nseconds = 1.0\nmid_step = "yes"\n' 'faults_mid_type.toml:.*mid_step'
case_ faults_back_early '[topology]\nkind = "ring"\nworkers = 3\n[[faults]]\nrank = 1\nat_step = 30\nback_at_step = 20\n' 'faults_back_early.toml:4: .*back_at_step = 20 must come after at_step = 30'
case_ restarts_negative '[topology]\nkind = "ring"\n[train]\nrestarts = -1\n' 'restarts_negative.toml:4.*train.restarts'
# [sweep]
case_ sweep_not_array '[sweep]\n"topology.workers" = 2\n' 'sweep_not_array.toml:2.*\[sweep\] topology.workers must be a non-empty array'
case_ sweep_empty '[sweep]\n"topology.workers" = []\n' 'sweep_empty.toml:2.*non-empty array'
case_ sweep_key '[sweep]\n"topology.wrkers" = [1, 2]\n' "sweep_key.toml:2.*unknown key 'topology.wrkers'.*did you mean 'topology.workers'"
case_ sweep_variant_key '[sweep.variants]\n"a" = { "topology.knd" = "ring" }\n' "sweep_variant_key.toml:2.*unknown key 'topology.knd'"
case_ sweep_variant_empty '[sweep.variants]\n"a" = {}\n' 'sweep_variant_empty.toml:2.*sets no key'
case_ sweep_variant_value '[sweep.variants]\n"a" = 3\n' 'sweep_variant_value.toml:2.*must be a table'
# --set
case_ set_unknown '[train]\nlr = 0.1\n' "--set train.lrr=0.2: unknown key 'train.lrr'.*did you mean 'train.lr'" --set train.lrr=0.2
case_ set_noeq '' '--set train.lr: expected key=value' --set train.lr
case_ set_type '' '--set train.epochs=two: train.epochs must be' --set train.epochs=two
case_ set_range '' '--set train.epochs=0: train.epochs = 0 is out of range \[1, 100000\]' --set train.epochs=0
case_ set_enum '' '--set topology.kind=rign: topology.kind = "rign" is not one of' --set topology.kind=rign
case_ sweep_flag '' 'KEY=V1,V2' --sweep topology.workers
case_ procs_bad '' '--procs x: expected a number of processes' --procs x
case_ procs_single '' 'topology.kind = "single" trains one worker in one process: drop --procs 2' --procs 2
case_ collective_restarts '[topology]\nkind = "ring"\nallreduce = "collective"\n[train]\nrestarts = 1\n' \
  'collective_restarts.toml:3: topology.ring.allreduce = "collective" cannot serve transport.rejoin_s or train.restarts'
case_ collective_partition '[topology]\nkind = "ring"\nworkers = 3\nallreduce = "collective"\n[[faults]]\nkind = "partition"\nranks = [2]\nat_step = 5\nseconds = 1.0\n' \
  'topology.ring.allreduce = "collective" cannot serve \[\[faults\]\] kind = "partition"'
case_ allreduce_enum '[topology]\nkind = "ring"\nallreduce = "nccl"\n' 'allreduce_enum.toml:3: topology.ring.allreduce = "nccl" is not one of' 
# files
mkdir -p adir
inv config_dir 'config file adir is not a regular file \(a directory' run adir -q
inv config_missing 'config file nowhere.toml does not exist' run nowhere.toml -q
inv config_devzero 'config file /dev/zero is not a regular file' run /dev/zero -q
head -c 2000000 /dev/zero | tr '\0' '#' > big.toml
inv config_big 'config file big.toml is 2000000 bytes: more than' run big.toml -q
# data
printf '[data]\ndataset = "fashion-mnist"\npath = "%s/nowhere"\n' "$tmp" > data_missing.toml
inv data_missing 'nowhere' run data_missing.toml -q --no-report --out "$tmp/out-data"
# A key swept twice, and a variant that sets a key the grid varies: points labelled apart that run alike.
inv sweep_twice 'the sweep varies topology.workers twice: give all its values in one --sweep' \
  run "$src/examples/ring.toml" --sweep topology.workers=1,2 --sweep topology.workers=3 -q --no-report --out "$tmp/out-twice"
inv sweep_and_set '--set topology.workers is also swept' \
  run "$src/examples/ring.toml" --set topology.workers=4 --sweep topology.workers=1,2 -q --no-report --out "$tmp/out-setsweep"
printf '[topology]\nkind = "ring"\n[sweep]\n"topology.workers" = [2, 4]\n[sweep.variants]\none = { "topology.workers" = 1 }\ntwo = { "train.lr" = 0.1 }\n' > variant_grid.toml
inv sweep_variant_grid '\[sweep.variants\] "one" sets topology.workers, which the sweep also varies' run variant_grid.toml -q --no-report --out "$tmp/out-vg"
# A worker count that topology.kind = "single" would ignore (a scaling sweep of identical runs).
inv single_workers '--set topology.workers = 4, but topology.kind = "single" trains one worker' \
  run "$src/examples/default.toml" --set topology.workers=4 -q --no-report --out "$tmp/out-single4"
inv single_sweep '--set topology.workers = 2, but topology.kind = "single" trains one worker' \
  run "$src/examples/default.toml" --sweep topology.workers=1,2 -q --no-report --out "$tmp/out-single-sweep"
# IDX files whose test split holds no images: an error, not "0% test accuracy".
mkdir -p idx0
python3 - idx0 <<'PY'
import struct, sys
def write(stem, n, magic, dims):
    with open(f"{sys.argv[1]}/{stem}", "wb") as f:
        f.write(struct.pack(">" + "I" * (2 + len(dims)), magic, n, *dims) + bytes(n * (dims[0] * dims[1] if dims else 1)))
write("train-images-idx3-ubyte", 8, 0x803, [28, 28]); write("train-labels-idx1-ubyte", 8, 0x801, [])
write("t10k-images-idx3-ubyte", 0, 0x803, [28, 28]); write("t10k-labels-idx1-ubyte", 0, 0x801, [])
PY
printf '[data]\ndataset = "fashion-mnist"\npath = "%s/idx0"\n' "$tmp" > data_notest.toml
inv data_notest 'data_notest.toml: data.dataset = "fashion-mnist" at .*/idx0 has no test samples' run data_notest.toml -q --no-report --out "$tmp/out-notest"
# A value that came from --set is blamed on --set, not on the file.
printf '[data]\ndataset = "fashion-mnist"\n' > plain_data.toml
inv data_notest_set '^gradwire: error: --set: data.dataset = "fashion-mnist" at .*/idx0 has no test samples' \
  run plain_data.toml -q --no-report --out "$tmp/out-notest-set" --set data.path=\"$tmp/idx0\"
inv mnist_set '--set data.dataset = "mnist" needs data.path' run plain_data.toml -q --no-report --out "$tmp/out-mnist" \
  --set data.dataset=\"mnist\"
# results folder
printf '[experiment]\nname = "r"\n[train]\nmax_steps = 2\n[data]\ndataset = "synthetic"\nsynthetic_train = 256\nsynthetic_test = 64\n' > rerun.toml
"$gw" run rerun.toml -q --no-report --out "$tmp/out-rerun" > /dev/null 2>&1 || { echo "FAIL: the first run of rerun.toml failed" >&2; failed=$((failed + 1)); }
inv results_rerun "results folder $tmp/out-rerun already holds a run \(completed\): nothing is overwritten.*--out DIR.*--force" run rerun.toml -q --no-report --out "$tmp/out-rerun"
inv results_config_rerun "already holds a run" run "$tmp/out-rerun/config.toml" -q --no-report --out "$tmp/out-rerun"
inv bench_odd_size "-b 12342 bytes is not a whole number of floats.*use 12340 or 12344" bench allreduce -b 12342 -e 12342
# --force replaces only a run: a file of the user's in the folder refuses it, and is left as it was.
touch "$tmp/out-rerun/trace.json.tmp" "$tmp/out-rerun/report.html"
echo "mine" > "$tmp/out-rerun/notes.txt"
inv results_foreign_force "results folder $tmp/out-rerun holds files that gradwire did not write \('notes.txt'\)" \
  run rerun.toml -q --no-report --force --out "$tmp/out-rerun"
[[ -f $tmp/out-rerun/notes.txt && -f $tmp/out-rerun/summary.json ]] ||
  { echo "FAIL: a refused --force changed the folder: $(ls "$tmp/out-rerun")" >&2; failed=$((failed + 1)); }
rm "$tmp/out-rerun/notes.txt"
# --force replaces the earlier run, and nothing of it is left beside the new one.
if "$gw" run rerun.toml -q --no-report --force --set experiment.trace=false --out "$tmp/out-rerun" > force.txt 2>&1; then
  [[ -f $tmp/out-rerun/summary.json && ! -e $tmp/out-rerun/report.html && ! -e $tmp/out-rerun/trace.json &&
     ! -e $tmp/out-rerun/trace.json.tmp ]] ||
    { echo "FAIL: --force left the earlier run's files: $(ls "$tmp/out-rerun")" >&2; failed=$((failed + 1)); }
else
  echo "FAIL: --force: $(cat force.txt)" >&2
  failed=$((failed + 1))
fi
touch afile
inv results_file 'results folder afile exists and is not a folder' run rerun.toml -q --no-report --out afile
# Usage errors exit 2 like config errors (CLI11's own code for an unknown flag is 109).
inv unknown_flag 'The following argument was not expected: --frobnicate' run rerun.toml --frobnicate
inv unknown_command 'A subcommand is required' frobnicate
inv export_nothing 'neither a run folder \(metrics.jsonl\) nor a sweep folder' export --tensorboard "$tmp"
inv compare_one 'runs: At least 2 required but received 1' compare "$tmp/out-rerun"
inv compare_not_run 'not a run folder \(no summary.json or metrics.jsonl\)' compare "$tmp/out-rerun" "$tmp" --out "$tmp/cmp"

# Data files that cannot be read whole: each a clear error naming the path, none a hang.
mkfifo "$tmp/fifo"
gpt="[model]\nkind = \"gpt\"\nlayers = 1\nd_model = 16\nheads = 1\ncontext = 8\n"
case_ data_fifo "$gpt[data]\ndataset = \"text\"\npath = \"$tmp/fifo\"\n" 'data.path = ".*/fifo" is a FIFO \(named pipe\)'
ln -s "$tmp/loop2" "$tmp/loop1" && ln -s "$tmp/loop1" "$tmp/loop2"
case_ data_loop "$gpt[data]\ndataset = \"text\"\npath = \"$tmp/loop1\"\n" 'data.path = ".*/loop1" is a loop of symbolic links'
case_ data_proc_mem "$gpt[data]\ndataset = \"text\"\npath = \"/proc/self/mem\"\n" 'data.path: error while reading /proc/self/mem after 0 bytes'
mkdir -p "$tmp/binary" && printf 'a\0b' > "$tmp/binary/x.bin"
case_ data_binary "$gpt[data]\ndataset = \"text\"\npath = \"$tmp/binary\"\n" '\(0 text files; 1 skipped as binary: they hold NUL bytes\)'
mkdir -p "$tmp/idxfifo" && mkfifo "$tmp/idxfifo/train-images-idx3-ubyte" "$tmp/idxfifo/train-labels-idx1-ubyte" \
  "$tmp/idxfifo/t10k-images-idx3-ubyte" "$tmp/idxfifo/t10k-labels-idx1-ubyte"
case_ data_idx_fifo "[data]\ndataset = \"fashion-mnist\"\npath = \"$tmp/idxfifo\"\n" 'dataset file .*/idxfifo/train-images-idx3-ubyte is a FIFO'
# A label skew so strong that a worker gets nothing: named, with its share.
case_ dirichlet_empty '[topology]\nkind = "ring"\nworkers = 8\n[data]\ndataset = "synthetic"\nsynthetic_train = 256\nsynthetic_test = 64\npartition = "dirichlet"\ndirichlet_alpha = 0.001\n[train]\nbatch_size = 8\n' \
  'data.dirichlet_alpha = 0.001.*: worker [0-7] of 8 drew no samples of the 256 \(its largest share of any class is'
inv sample_tokens_negative '--tokens: Value -5 not in range 0 to 1073741824' sample nowhere --prompt x --tokens -5

echo "$n cases, $failed failed"
[[ $failed -eq 0 ]]
