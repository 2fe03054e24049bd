#!/usr/bin/env python3
"""Virtual time against real runs: the same config run on the machine's
clock, then on the virtual clock fed from that run's measurements, side
by side. Used by bench/virtual_vs_real.sh.

  virtual_vs_real.py calibrate REAL_DIR HOPS [held] -> the intra-host
      latency (us) at which the HOPS messages on a step's critical path take
      the real run's mean exchange time per step (async push-pull: push and
      reply, 2; SSP: push, reply, pull, reply, 4; a ring of N: 2(N-1);
      AD-PSGD: request and reply, 2). With "held", less the time pulls were
      held for the staleness bound (SSP); the ring's and AD-PSGD's recorded
      waits are their own messages' latency and stay in.
  virtual_vs_real.py fit REAL_DIR VIRTUAL_DIR HOPS [--key=KEY] CMD... -> the
      latency (us; KEY, default virtual.intra_latency_us) at which the
      virtual run `CMD --set KEY=L --out VIRTUAL_DIR` takes the real run's
      mean step time, by bisection (with virtual.cores_per_host the
      waiting for a core is simulated, so the step time is no longer
      linear in L); that run is left in VIRTUAL_DIR. HOPS bounds the search
      (calibrate's latency puts all of the exchange on the links).
  virtual_vs_real.py row LABEL REAL_DIRS VIRTUAL_DIRS -> one table row: the
      means over rounds (comma-separated folders, in pairs), the real
      runs' spread of mean staleness, and each round's p99
"""
import json
import subprocess
import sys


def steps(d):
    out = []
    with open(d + "/metrics.jsonl") as f:
        for line in f:
            j = json.loads(line)
            if j.get("type") == "step":
                out.append(j)
    return out


def summary(d):
    with open(d + "/summary.json") as f:
        return json.load(f)


def step_ms(d):
    """Mean wall time of a worker's step: each worker's train time over its steps."""
    s = summary(d)
    per = [(w["compute_seconds"] + w["comm_seconds"]) / w["steps"] for w in s["per_worker"] if w.get("steps", 0) > 0]
    return 1e3 * sum(per) / len(per)


def params_bytes(d):
    return summary(d)["parameters"] * 4 + 64


def calibrate(d, hops, held=False):
    rec = steps(d)
    n = sum(r["steps"] for r in rec)
    comm = sum((r["comm_ms"] - (r["wait_ms"] if held else 0)) * r["steps"] for r in rec) / n
    return 1e3 * comm / hops


def fit(real, virt, hops, cmd, key="virtual.intra_latency_us"):
    want = step_ms(real)
    seen, last = {}, [None]

    def run(lat):
        if lat not in seen or last[0] != lat:
            subprocess.run(cmd + ["--set", f"{key}={lat:.4f}", "--out", virt, "--force"],
                           check=True, stdout=subprocess.DEVNULL)
            seen[lat], last[0] = step_ms(virt), lat
        return seen[lat]

    lo, hi = 0.0, max(calibrate(real, hops), 1.0)
    while run(hi) < want and hi < 1e6:  # the bracket: the step time grows with the latency
        lo, hi = hi, 2 * hi
    for _ in range(6):
        mid = 0.5 * (lo + hi)
        if run(mid) < want:
            lo = mid
        else:
            hi = mid
    best = min((lat for lat in seen), key=lambda lat: abs(seen[lat] - want))
    run(best)  # leaves that run in VIRTUAL_DIR
    return best


def row(label, reals, virts):
    """REALS, VIRTS: comma-separated run folders, pairs in order (rounds)."""
    reals, virts = reals.split(","), virts.split(",")
    mean = lambda xs: sum(xs) / len(xs)
    r = [summary(d)["staleness"] for d in reals]
    v = [summary(d)["staleness"] for d in virts]
    sr, sv = mean([step_ms(d) for d in reals]), mean([step_ms(d) for d in virts])
    err = lambda a, b: f"{100.0 * (b - a) / a:+.1f}%" if a else "n/a"
    if any(x["count"] == 0 for x in r) or all(x["max"] == 0 for x in r + v):  # lock step, or none to speak of
        cells = "n/a | n/a | n/a | n/a | n/a"
    else:
        rm, vm = mean([x["mean"] for x in r]), mean([x["mean"] for x in v])
        spread = f" ({min(x['mean'] for x in r):.2f}-{max(x['mean'] for x in r):.2f})" if len(r) > 1 else ""
        p99 = lambda xs: "/".join(str(x["p99"]) for x in xs)
        cells = f"{rm:.2f}{spread} | {vm:.2f} | {err(rm, vm)} | {p99(r)} | {p99(v)}"
    print(f"| {label} | {cells} | {sr:.3f} | {sv:.3f} | {err(sr, sv)} |")


if __name__ == "__main__":
    if sys.argv[1] == "calibrate":
        print(f"{calibrate(sys.argv[2], float(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == 'held'):.4f}")
    elif sys.argv[1] == "fit":
        key = sys.argv[5][len("--key="):] if sys.argv[5].startswith("--key=") else None
        args = sys.argv[6:] if key else sys.argv[5:]
        print(f"{fit(sys.argv[2], sys.argv[3], float(sys.argv[4]), args, key or 'virtual.intra_latency_us'):.4f}")
    elif sys.argv[1] == "row":
        row(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: virtual_vs_real.py calibrate REAL HOPS [held] | fit REAL VIRTUAL HOPS [--key=KEY] CMD... | row LABEL REAL VIRTUAL")
