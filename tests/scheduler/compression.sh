#!/usr/bin/env bash
# Compressed rings (compression.kind), as a user runs them, at 3 workers:
#  - every mode gives the same model.safetensors, byte for byte, on a
#    second run in one process and across 3 processes (where payloads
#    arrive in whatever order the processes send them);
#  - the bytes every worker counted equal the payload formula
#    (docs/compression.md) times the steps and the 2 other workers;
#    PowerSGD's factors go round a ring allreduce: each worker sends each
#    segment of P and of Q once or twice, as its position says;
#  - a dense ring's counted bytes are a ring allreduce's, 2 (n-1)/n of the
#    gradient a step each way, and half that with bf16 chunks
#    (transport.wire_dtype), which give the same bits across processes;
#  - error feedback changes the result (the residual is used);
#  - top-k pushes to a sync parameter server's shards and DiLoCo's
#    compressed pseudo-gradients give the same bits across 3 processes, as
#    does CHOCO gossip.
# Usage: compression.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

common=(-q --no-report --set topology.workers=3 --set data.train_subset=3000 --set data.test_subset=300
        --set train.epochs=1 --set train.eval=\"after\" --set train.threads=1)

run() { # NAME [ARGS...]
  local name=$1
  shift
  "$gw" run "$src/examples/ring.toml" "${common[@]}" "$@" --out "$tmp/$name" >"$tmp/$name.txt" 2>&1 ||
    { bad "$name failed: $(tail -3 "$tmp/$name.txt")"; return 1; }
}

same() { # A B WHAT
  if cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; then
    echo "ok: $3"
  else
    bad "$3: the models differ"
  fi
}

for mode in topk randk sign bf16 int8 powersgd; do
  z=(--set compression.kind=\"$mode\" --set compression.ratio=0.02)
  run "$mode" "${z[@]}" || continue
  run "$mode.again" "${z[@]}" && same "$mode" "$mode.again" "$mode: a second run gives the same bits"
  run "$mode.procs" "${z[@]}" --procs 3 && same "$mode" "$mode.procs" "$mode: 3 processes give the bits of one"
done
# Compressed pushes to 2 parameter-server shards: a sync PS and DiLoCo
# (pseudo-gradients every 4 steps) repeat bit for bit across 3 processes.
for kind in parameter-server diloco; do
  z=(--set topology.kind=\"$kind\" --set topology.ps.shards=2 --set topology.local_steps=4
     --set compression.kind=\"topk\" --set compression.ratio=0.02)
  run "$kind" "${z[@]}" || continue
  run "$kind.procs" "${z[@]}" --procs 3 && same "$kind" "$kind.procs" "$kind, top-k pushes: 3 processes give the bits of one"
done
# Streaming DiLoCo's low-precision outer exchange (transport.wire_dtype =
# "int8": pseudo-gradients rounded without error feedback), 2 fragments
# on 2 shards each, across 3 processes; a quarter of the dense bytes.
z=(--set topology.kind=\"diloco\" --set topology.ps.shards=2 --set topology.local_steps=4 --set topology.streaming.fragments=2
   --set transport.wire_dtype=\"int8\")
run stream8 "${z[@]}" && run stream8.procs "${z[@]}" --procs 3 &&
  same stream8 stream8.procs "streaming DiLoCo, int8 outer exchange: 3 processes give the bits of one"
run stream32 --set topology.kind=\"diloco\" --set topology.ps.shards=2 --set topology.local_steps=4 --set topology.streaming.fragments=2
/usr/bin/python3 - "$tmp" <<'PY' || fail=1
import json, sys
d, w = (json.load(open(f"{sys.argv[1]}/{k}/summary.json")) for k in ("stream32", "stream8"))
ok = 0.25 <= w["bytes_sent"] / d["bytes_sent"] <= 0.26
print(("ok" if ok else "FAIL") + f": int8 outer exchange sent {w['bytes_sent']} bytes, fp32 {d['bytes_sent']}",
      file=sys.stdout if ok else sys.stderr)
sys.exit(0 if ok else 1)
PY
# CHOCO gossip (D-PSGD on a ring of 3, top-k payloads) across 3 processes.
z=(--set topology.kind=\"gossip\" --set compression.kind=\"topk\" --set compression.ratio=0.1)
run choco "${z[@]}" && run choco.procs "${z[@]}" --procs 3 &&
  same choco choco.procs "gossip, CHOCO top-k: 3 processes give the bits of one"
run dense
# bf16 chunks on the dense ring (transport.wire_dtype): 3 processes give
# the bits of one, and each worker sends half the dense ring's bytes (a
# chunk of odd length rounds its words up).
z=(--set transport.wire_dtype=\"bf16\")
run wire "${z[@]}" && run wire.procs "${z[@]}" --procs 3 &&
  same wire wire.procs "wire_dtype bf16: 3 processes give the bits of one"
/usr/bin/python3 - "$tmp" <<'PY' || fail=1
import json, sys
d, w = (json.load(open(f"{sys.argv[1]}/{k}/summary.json")) for k in ("dense", "wire"))
ok = d["bytes_sent"] / 2 <= w["bytes_sent"] <= d["bytes_sent"] / 2 * 1.001
print(("ok" if ok else "FAIL") + f": wire_dtype bf16 sent {w['bytes_sent']} bytes, the fp32 ring {d['bytes_sent']}",
      file=sys.stdout if ok else sys.stderr)
sys.exit(0 if ok else 1)
PY
run topk.no-ef --set compression.kind=\"topk\" --set compression.ratio=0.02 --set compression.error_feedback=false
cmp -s "$tmp/topk/model.safetensors" "$tmp/topk.no-ef/model.safetensors" &&
  bad "top-k with and without error feedback gave the same model"

# The counted bytes against the formulas. The MLP 784-256-128-10's buffer:
# each tensor padded to 16 floats.
/usr/bin/python3 - "$tmp" <<'EOF' || fail=1
import json, math, sys
tmp = sys.argv[1]
shapes = [(256, 784), (1, 256), (128, 256), (1, 128), (10, 128), (1, 10)]
pad = lambda k: (k + 15) // 16 * 16
n = sum(pad(r * c) for r, c in shapes)
def words(mode):
    if mode == "bf16": return (n + 1) // 2
    if mode in ("topk", "randk"): return 1 + 2 * min(n, max(1, math.ceil(0.02 * n)))
    if mode == "sign": return 1 + (n + 31) // 32
    if mode == "int8": return (n + 255) // 256 + (n + 3) // 4
def factors():  # PowerSGD at rank 2: P and the whole blocks, then Q
    first = second = 0
    for r, c in shapes:
        if r > 1 and 2 * (r + c) < r * c:
            first += 2 * r; second += 2 * c
        else:
            first += r * c
    return first + (n - sum(r * c for r, c in shapes)), second  # padding travels whole
def ring(length, workers, p):
    """Floats worker p sends and receives in a ring allreduce of `length`:
    hop h of segment s leaves worker s + h (h < 2 (workers - 1))."""
    seg = [length * (s + 1) // workers - length * s // workers for s in range(workers)]
    times = lambda d: 2 if d % workers <= workers - 3 else 1
    return (sum(times(p - s) * seg[s] for s in range(workers)),
            sum(times(p - s - 1) * seg[s] for s in range(workers)))
def want(mode, steps, p):  # (sent, received) bytes of worker p
    if mode == "dense": return (4 * steps * 2 * 2 * n // 3,) * 2
    if mode == "powersgd":
        (s1, r1), (s2, r2) = (ring(k, 3, p) for k in factors())
        return 4 * steps * (s1 + s2), 4 * steps * (r1 + r2)
    return (4 * steps * 2 * words(mode),) * 2
ok = True
for mode in ["topk", "randk", "sign", "bf16", "int8", "powersgd", "dense"]:
    s = json.load(open(f"{tmp}/{mode}/summary.json"))
    steps = s["steps_per_worker"]
    total = 0
    for w in s["per_worker"]:
        sent, received = want(mode, steps, w["worker"])
        total += sent
        if w["bytes_sent"] != sent or w["bytes_received"] != received:
            print(f"FAIL: {mode}: worker {w['worker']} counted {w['bytes_sent']} sent, {w['bytes_received']} "
                  f"received; the formula says {sent}, {received}", file=sys.stderr)
            ok = False
    if s["bytes_sent"] != total:
        print(f"FAIL: {mode}: summary bytes_sent {s['bytes_sent']}, expected {total}", file=sys.stderr)
        ok = False
    if ok:
        print(f"ok: {mode}: {total // 3} bytes per worker on average, as the formula says")
sys.exit(0 if ok else 1)
EOF
exit $fail
