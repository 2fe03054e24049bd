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
  virtual_vs_real.py fit REAL_DIR VIRTUAL_DIR HOPS CMD... -> the intra-host
      latency (us) at which the virtual run `CMD --set
      virtual.intra_latency_us=L --out VIRTUAL_DIR` takes the real run's
      mean step time, by bisection (with virtual.cores_per_host the
      waiting for a core is simulated, so the step time is no longer
      linear in L); that run is left in VIRTUAL_DIR. HOPS bounds the search
      (calibrate's latency puts all of the exchange on the links).
  virtual_vs_real.py row LABEL REAL_DIR VIRTUAL_DIR -> one table row
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


def fit(real, virt, hops, cmd):
    want = step_ms(real)
    seen, last = {}, [None]

    def run(lat):
        if lat not in seen or last[0] != lat:
            subprocess.run(cmd + ["--set", f"virtual.intra_latency_us={lat:.4f}", "--out", virt, "--force"],
                           check=True, stdout=subprocess.DEVNULL)
            seen[lat], last[0] = step_ms(virt), lat
        return seen[lat]

    lo, hi = 0.0, max(calibrate(real, hops), 1.0)
    while run(hi) < want and hi < 1e6:  # the bracket: the step time grows with the latency
        lo, hi = hi, 2 * hi
    for _ in range(8):
        mid = 0.5 * (lo + hi)
        if run(mid) < want:
            lo = mid
        else:
            hi = mid
    best = min((lat for lat in seen), key=lambda lat: abs(seen[lat] - want))
    run(best)  # leaves that run in VIRTUAL_DIR
    return best


def row(label, real, virt):
    r, v = summary(real)["staleness"], summary(virt)["staleness"]
    sr, sv = step_ms(real), step_ms(virt)
    err = lambda a, b: f"{100.0 * (b - a) / a:+.1f}%" if a else "n/a"
    if r["count"] == 0 or (r["max"] == 0 and v["max"] == 0):  # lock step, or no staleness to speak of
        cells = "n/a | n/a | n/a | n/a | n/a"
    else:
        cells = f"{r['mean']:.2f} | {v['mean']:.2f} | {err(r['mean'], v['mean'])} | {r['p99']} | {v['p99']}"
    print(f"| {label} | {cells} | {sr:.3f} | {sv:.3f} | {err(sr, sv)} |")


if __name__ == "__main__":
    if sys.argv[1] == "calibrate":
        print(f"{calibrate(sys.argv[2], float(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == 'held'):.4f}")
    elif sys.argv[1] == "fit":
        print(f"{fit(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5:]):.4f}")
    elif sys.argv[1] == "row":
        row(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: virtual_vs_real.py calibrate REAL HOPS [held] | fit REAL VIRTUAL HOPS CMD... | row LABEL REAL VIRTUAL")
