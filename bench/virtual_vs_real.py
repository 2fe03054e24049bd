#!/usr/bin/env python3
"""Virtual time against real runs: the same config run on the machine's
clock, then on the virtual clock fed from that run's measurements, side
by side. Used by bench/virtual_vs_real.sh.

  virtual_vs_real.py fit REAL_DIR VIRTUAL_DIR HOPS MODEL CMD... -> the
      latency overrides (key=value ...) at which the virtual run `CMD ...
      --out VIRTUAL_DIR` takes the real run's mean step time, found by
      bisection (with virtual.cores_per_host the waiting for a core is
      simulated, so the step time is not linear in the latency); that run
      is left in VIRTUAL_DIR. MODEL "one-host": one latency for every
      message (virtual.intra_latency_us). MODEL "process-hosts": each
      process a host (the config says so), and a parameter server's rank 0
      reaches the shard beside its worker in-process: links between hosts
      take L (transport.latency_us) and rank 0's worker r * L, where r is
      what the real run says: its workers' exchange time less holds and
      the shard's update, rank 0's over the others' mean. The search
      starts from the latency at which the HOPS messages on a step's
      critical path (push-and-pull 2, a ring of N 2(N-1), AD-PSGD 2) take
      all of the real run's mean exchange time.
  virtual_vs_real.py apply REAL_DIR -> virtual.apply_gbps: a shard's gradient
      bytes over the median of the real run's `apply` spans (its trace.json;
      0 when it has none: no parameter server)
  virtual_vs_real.py copy REAL_DIR -> virtual.copy_gbps: this machine's
      memcpy of one shard's worth of the run's parameters (a push's
      gradient, a pull's reply), median of 200, hot in cache as a
      gradient just computed is
  virtual_vs_real.py row LABEL REAL_DIRS VIRTUAL_DIRS -> one table row: the
      means over rounds (comma-separated folders, in pairs), the real
      runs' spread of mean staleness, and each round's p99
  virtual_vs_real.py predicted LABEL REAL_DIRS VIRTUAL_DIR -> one table row
      of predictions against real runs (means over the rounds, and the
      real runs' spread): mean staleness, step time and time to the
      target accuracy, each with the prediction's error
"""
import json
import subprocess
import sys
import time


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


def all_on_links(d, hops):
    """us per message if the HOPS messages of a step took its whole mean exchange."""
    rec = steps(d)
    n = sum(r["steps"] for r in rec)
    return 1e3 * sum(r["comm_ms"] * r["steps"] for r in rec) / n / hops


def rank0_ratio(real):
    """Rank 0's per-message latency over the other ranks' (process-hosts)."""
    rec = [r for r in steps(real) if r["step"] > 5]  # past the first steps' set-up
    ranks = sorted({r["worker"] for r in rec})

    def exchange_us(w):
        xs = [r["comm_ms"] - r["wait_ms"] for r in rec if r["worker"] == w]
        return 1e3 * sum(xs) / len(xs)

    upd = apply_us(real)
    others = sum(exchange_us(w) for w in ranks[1:]) / max(1, len(ranks) - 1)
    return max(0.0, exchange_us(ranks[0]) - upd) / max(1e-9, others - upd)


def fit(real, virt, hops, model, cmd):
    want = step_ms(real)
    ratio = rank0_ratio(real) if model == "process-hosts" else None
    seen, last = {}, None

    def overrides(lat):
        if ratio is None:
            return [f"virtual.intra_latency_us={lat:.4f}"]
        return [f"transport.latency_us={lat:.4f}", f"virtual.intra_latency_us={ratio * lat:.4f}"]

    def run(lat):
        nonlocal last
        if last != lat:
            sets = [a for o in overrides(lat) for a in ("--set", o)]
            subprocess.run(cmd + sets + ["--out", virt, "--force"], check=True, stdout=subprocess.DEVNULL)
            seen[lat], last = step_ms(virt), lat
        return seen[lat]

    lo, hi = 0.0, max(all_on_links(real, hops), 1.0)
    while run(hi) < want and hi < 1e6:  # the bracket: the step time grows with the latency
        lo, hi = hi, 2 * hi
    for _ in range(6):
        mid = 0.5 * (lo + hi)
        if run(mid) < want:
            lo = mid
        else:
            hi = mid
    run(min(seen, key=lambda lat: abs(seen[lat] - want)))  # leaves the best run in VIRTUAL_DIR
    return " ".join(overrides(last))


def shard_bytes(d):
    """One shard's parameters (a push's gradient, a pull's reply), in bytes."""
    s = summary(d)
    return 4 * s["parameters"] // max(1, s.get("shards", 1))


def apply_us(d):
    """The median of the real run's `apply` spans (trace.json); 0 without any."""
    try:
        with open(d + "/trace.json") as f:
            t = json.load(f)
    except FileNotFoundError:
        return 0.0
    events = t["traceEvents"] if isinstance(t, dict) else t
    durs = sorted(e["dur"] for e in events if e.get("name") == "apply" and e.get("ph") == "X")
    return durs[len(durs) // 2] if durs else 0.0


def apply_gbps(d):
    us = apply_us(d)
    return shard_bytes(d) / (us * 1e-6) / 1e9 if us > 0 else 0.0


def copy_gbps(d):
    n = shard_bytes(d)
    src, dst = bytearray(b"\x01" * n), bytearray(n)
    view = memoryview(dst)
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        view[:] = src
        times.append(time.perf_counter() - t0)
    times.sort()
    return n / times[len(times) // 2] / 1e9


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


def predicted(label, reals, virt):
    reals = reals.split(",")
    mean = lambda xs: sum(xs) / len(xs)
    err = lambda a, b: f"{100.0 * (b - a) / a:+.1f}%" if a else "n/a"

    def cells(values, pred, fmt):
        """Over the real runs that got there (a run that never reached the target: None)."""
        got = [x for x in values if x is not None]
        if not got or pred is None:
            return f"{'/'.join('-' if x is None else fmt % x for x in values)} | {'-' if pred is None else fmt % pred} | n/a"
        spread = f" ({fmt % min(got)}-{fmt % max(got)})" if len(got) > 1 else ""
        short = f", {len(got)} of {len(values)} runs" if len(got) < len(values) else ""
        return f"{fmt % mean(got)}{spread}{short} | {fmt % pred} | {err(mean(got), pred)}"

    stale = cells([summary(d)["staleness"]["mean"] for d in reals], summary(virt)["staleness"]["mean"], "%.2f")
    step = cells([step_ms(d) for d in reals], step_ms(virt), "%.2f")
    target = cells([summary(d)["time_to_target"] for d in reals], summary(virt)["time_to_target"], "%.2f")
    print(f"| {label} | {stale} | {step} | {target} |")


if __name__ == "__main__":
    if sys.argv[1] == "fit":
        print(fit(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6:]))
    elif sys.argv[1] == "apply":
        print(f"{apply_gbps(sys.argv[2]):.4f}")
    elif sys.argv[1] == "copy":
        print(f"{copy_gbps(sys.argv[2]):.4f}")
    elif sys.argv[1] == "row":
        row(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "predicted":
        predicted(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: virtual_vs_real.py fit REAL VIRTUAL HOPS MODEL CMD... | apply REAL | copy REAL | "
                 "row LABEL REALS VIRTUALS | predicted LABEL REALS VIRTUAL")
