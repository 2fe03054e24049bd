#!/usr/bin/env bash
# Across emulated hosts (scripts/emulated_hosts.sh: network, UTS, IPC and
# mount namespaces with their own hostnames, addresses and /dev/shm): a
# 2-rank sync ring trains the same model, bit for bit, as in one process
# (its buckets summed by the collective communicator, with UCX's
# transports and with TCP alone, and by the ring of actors), with nothing
# lent by shared-memory reference between the hosts; a 3-host
# async parameter server completes; the communicator sums hierarchically
# on hosts of equal and unequal rank counts. Exits 77 (ctest: "Skipped") where
# namespaces cannot be made (not root).
# Usage: emulated_hosts.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
[[ $(id -u) -eq 0 ]] && ip netns add gwprobe$$ 2>/dev/null && ip netns del gwprobe$$ ||
  { echo "SKIP: emulated hosts need root and ip netns"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/logs*/rank-*.txt; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 20 "$f" >&2; }; done; exit 1; }
hosts() { # N LOGDIR COMMAND...
  local n=$1 logs=$2
  shift 2
  mkdir -p "$logs"
  GW_HOSTS_LOG=$logs timeout 240 "$src/scripts/emulated_hosts.sh" "$n" -- "$@"
}

# A rank's silence is judged after 5 s, times the suite's scale: under
# ASan four instrumented ranks that poll their links share 2 cores with
# another test, and one went 5 s without a frame.
silence=$((5000 * ${GRADWIRE_TIME_SCALE:-1}))
set -- --no-report --set train.max_steps=40 --set data.train_subset=12000 --set data.test_subset=1000 \
  --set transport.peer_timeout_ms=$silence
"$gw" run "$src/examples/ring.toml" -q --out "$tmp/one" "$@" > "$tmp/one.txt" 2>&1 || fail "one process: $(cat "$tmp/one.txt")"
hosts 2 "$tmp/logs2" "$gw" run "$src/examples/ring.toml" --out "$tmp/two" "$@" || fail "the ring across 2 hosts failed"
/usr/bin/python3 "$src/tests/transport/same_model.py" "$tmp/one" "$tmp/two" || fail "the models differ"
/usr/bin/python3 -c "import json,sys; s=json.load(open('$tmp/two/summary.json')); assert s['processes'] == 2, s['processes']; assert s['allreduce'] == 'collective', s['allreduce']" ||
  fail "the 2-host run was not across 2 processes, its buckets summed by the collective communicator"
# The ring of actors across the same hosts (topology.ring.allreduce = "actors"): the same model.
hosts 2 "$tmp/logs2a" "$gw" run "$src/examples/ring.toml" --out "$tmp/two-actors" "$@" --set 'topology.ring.allreduce="actors"' ||
  fail "the ring of actors across 2 hosts failed"
/usr/bin/python3 "$src/tests/transport/same_model.py" "$tmp/one" "$tmp/two-actors" || fail "the ring of actors: the models differ"
grep -q '"allreduce": "actors"' "$tmp/two-actors/summary.json" || fail "topology.ring.allreduce = \"actors\" was not the ring of actors"
# TCP alone: the link sends its frames (the ring's 0.47 MB chunks) eagerly
# instead of by rendezvous; the same model, and UCX takes the setting
# without a warning.
hosts 2 "$tmp/logs2t" "$gw" run "$src/examples/ring.toml" --out "$tmp/two-tcp" "$@" --set 'transport.tls="tcp"' ||
  fail "the ring across 2 hosts over TCP alone failed"
/usr/bin/python3 "$src/tests/transport/same_model.py" "$tmp/one" "$tmp/two-tcp" || fail "the models differ over TCP alone"
! grep -h "UCX  *WARN" "$tmp"/logs2t/rank-*.txt || fail "UCX warned over TCP alone"

# The allreduce across the 2 hosts, both engines (the communicator and the
# actors' ring): every sum checked, nothing lent (on one host the same
# command lends by shared-memory reference).
hosts 2 "$tmp/logsb" "$gw" bench allreduce --peer-timeout-ms $silence -b 64K -e 256K -n 5 -w 1 || fail "bench allreduce across 2 hosts failed"
grep -q "^# extra, .*: the actors' ring allreduce (ring), ucx, chunk" "$tmp/logsb/rank-0.txt" ||
  fail "bench allreduce across hosts: $(head -n 2 "$tmp/logsb/rank-0.txt") (memory lent across hosts?)"
[ "$(grep -c " ok$" "$tmp/logsb/rank-0.txt")" = 3 ] || fail "bench allreduce across hosts: a sum is wrong"
grep -q "TCP lanes to 1 of 1 peers" "$tmp/logsb/rank-0.txt" ||
  fail "bench allreduce across hosts: the communicator did not take its TCP lanes: $(head -n 1 "$tmp/logsb/rank-0.txt")"
# 2 hosts of 2 ranks: hierarchical by default (shared memory within each
# host, lanes across by local index; 4 MiB is several pieces), and the
# flat ring forced: shared memory within each host, lanes across, pair by pair.
GW_RANKS_PER_HOST=2 hosts 2 "$tmp/logsm" "$gw" bench allreduce --peer-timeout-ms $silence --engine comm -b 1K -e 4M -f 64 -n 5 -w 1 ||
  fail "bench allreduce on 2 hosts of 2 ranks failed"
grep -q "hierarchical at every size: 2 hosts of 2 ranks" "$tmp/logsm/rank-0.txt" &&
  [ "$(grep -c " ok$" "$tmp/logsm/rank-0.txt")" = 3 ] ||
  fail "bench allreduce on 2 hosts of 2 ranks: $(cat "$tmp/logsm/rank-0.txt")"
GW_RANKS_PER_HOST=2 hosts 2 "$tmp/logsf" "$gw" bench allreduce --peer-timeout-ms $silence --engine comm --comm-algo ring -b 1K -e 1M -f 16 -n 5 -w 1 ||
  fail "bench allreduce on 2 hosts of 2 ranks, the ring forced, failed"
grep -q "TCP lanes to 2 of 3 peers" "$tmp/logsf/rank-0.txt" && [ "$(grep -c " ok$" "$tmp/logsf/rank-0.txt")" = 3 ] ||
  fail "bench allreduce on 2 hosts of 2 ranks, the ring forced: $(cat "$tmp/logsf/rank-0.txt")"
# Hosts of unequal rank counts, 2 and 1: hierarchical too, the lone
# rank and its partner's host's first rank carrying the sums across.
GW_RANKS_PER_HOST=2,1 hosts 2 "$tmp/logsu" "$gw" bench allreduce --peer-timeout-ms $silence --engine comm -b 1K -e 4M -f 64 -n 5 -w 1 ||
  fail "bench allreduce on hosts of 2 ranks and 1 failed"
grep -q "hierarchical at every size: 2 hosts of 1 to 2 ranks" "$tmp/logsu/rank-0.txt" &&
  [ "$(grep -c " ok$" "$tmp/logsu/rank-0.txt")" = 3 ] ||
  fail "bench allreduce on hosts of 2 ranks and 1: $(cat "$tmp/logsu/rank-0.txt")"

hosts 3 "$tmp/logs3" "$gw" run "$src/examples/ps-async.toml" --out "$tmp/ps" --set topology.workers=3 \
  --set topology.ps.shards=1 "$@" || fail "the async parameter server across 3 hosts failed"
grep -q '"status": "completed"' "$tmp/ps/summary.json" || fail "the async parameter server did not complete"
# Hierarchical allreduce grouped by host (topology.group_size = 0): 2 hosts
# of 2 ranks make 2 groups of 2, the same model as groups of 2 in one process.
"$gw" run "$src/examples/hierarchical.toml" -q --out "$tmp/hier-one" "$@" >"$tmp/hier-one.txt" 2>&1 ||
  fail "hierarchical in one process: $(cat "$tmp/hier-one.txt")"
GW_RANKS_PER_HOST=2 hosts 2 "$tmp/logsh" "$gw" run "$src/examples/hierarchical.toml" --out "$tmp/hier" \
  --set topology.group_size=0 "$@" || fail "hierarchical by host across 2 hosts of 2 ranks failed"
grep -q "hierarchical allreduce grouped by host: 2 host(s) of 2 rank(s)" "$tmp/logsh/rank-0.txt" ||
  fail "hierarchical by host: $(grep -i hierarchical "$tmp/logsh/rank-0.txt")"
/usr/bin/python3 "$src/tests/transport/same_model.py" "$tmp/hier-one" "$tmp/hier" || fail "hierarchical by host: the models differ"
# Hosts of 2 ranks and 1: groups of 2 and 1, the same model as groups of
# 2 (the last smaller) in one process.
"$gw" run "$src/examples/hierarchical.toml" -q --out "$tmp/hier3-one" --set topology.workers=3 "$@" \
  >"$tmp/hier3-one.txt" 2>&1 || fail "hierarchical of 3 in one process: $(cat "$tmp/hier3-one.txt")"
GW_RANKS_PER_HOST=2,1 hosts 2 "$tmp/logsh3" "$gw" run "$src/examples/hierarchical.toml" --out "$tmp/hier3" \
  --set topology.workers=3 --set topology.group_size=0 "$@" || fail "hierarchical by host across hosts of 2 ranks and 1 failed"
grep -q "hierarchical allreduce grouped by host: 2 host(s) of 1 to 2 rank(s)" "$tmp/logsh3/rank-0.txt" ||
  fail "hierarchical by host, 2 ranks and 1: $(grep -i hierarchical "$tmp/logsh3/rank-0.txt")"
/usr/bin/python3 "$src/tests/transport/same_model.py" "$tmp/hier3-one" "$tmp/hier3" ||
  fail "hierarchical by host, 2 ranks and 1: the models differ"
# No shared-memory reference crosses a host: a ring of 4 on 2 hosts of 2,
# references on (the default). Rank 0 lends to rank 1, its host's, and to
# no rank of the other host.
GW_RANKS_PER_HOST=2 hosts 2 "$tmp/logsr" "$gw" run "$src/examples/ring.toml" --out "$tmp/refs" \
  --set topology.workers=4 --set topology.ring.chunk_kb=64 --set 'topology.ring.allreduce="actors"' "$@" ||
  fail "the ring across 2 hosts of 2 ranks failed"
/usr/bin/python3 -c "
import json
r = json.load(open('$tmp/refs/summary.json'))['shm_references_sent']
assert r[1] > 0, ('no reference to the same host\'s rank 1', r)
assert r[2] == 0 and r[3] == 0, ('references to the other host', r)
print('shared-memory references from rank 0, by peer:', r)" || fail "shared-memory references across hosts"
# A parameter shard per host: 2 hosts of 2 ranks, 2 shards on ranks 0 and 2.
GW_RANKS_PER_HOST=2 hosts 2 "$tmp/logsp" "$gw" run "$src/examples/ps-async.toml" --out "$tmp/per-host" \
  --set topology.workers=4 --set topology.ps.shard_placement=per-host "$@" || fail "a shard per host across 2 hosts failed"
grep -q "a parameter shard per host: 2 shard(s)" "$tmp/logsp/rank-0.txt" || fail "per-host: $(grep -i shard "$tmp/logsp/rank-0.txt")"
/usr/bin/python3 -c "import json; s=json.load(open('$tmp/per-host/summary.json')); assert s['status'] == 'completed' and s['shards'] == 2, (s['status'], s['shards'])" ||
  fail "per-host: the run did not complete with 2 shards"
echo "emulated hosts: the ring is bit for bit across 2 hosts, the async parameter server completes across 3, hierarchical groups by host, a shard per host"
