#!/usr/bin/env python3
"""Virtual time against real runs: the same config run on the machine's
clock, then on the virtual clock fed from that run's measurements, side
by side. Used by bench/virtual_vs_real.sh.

  virtual_vs_real.py calibrate REAL_DIR   -> the intra-host latency (us) at
      which a step's messages (async push-pull: push and its reply; SSP:
      push, reply, pull and its reply) take the real run's mean exchange
      time per step, less its waiting for the staleness bound
  virtual_vs_real.py row LABEL REAL_DIR VIRTUAL_DIR -> one table row
"""
import json
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


def calibrate(d):
    rec = steps(d)
    n = sum(r["steps"] for r in rec)
    comm = sum((r["comm_ms"] - r["wait_ms"]) * r["steps"] for r in rec) / n
    messages = 2 if summary(d)["mode"] == "async" else 4
    return 1e3 * comm / messages


def row(label, real, virt):
    r, v = summary(real)["staleness"], summary(virt)["staleness"]
    sr, sv = step_ms(real), step_ms(virt)
    err = lambda a, b: 100.0 * (b - a) / a if a else float("nan")
    print(f"| {label} | {r['mean']:.2f} | {v['mean']:.2f} | {err(r['mean'], v['mean']):+.1f}% | {r['p99']} | {v['p99']} "
          f"| {sr:.3f} | {sv:.3f} | {err(sr, sv):+.1f}% |")


if __name__ == "__main__":
    if sys.argv[1] == "calibrate":
        print(f"{calibrate(sys.argv[2]):.4f}")
    elif sys.argv[1] == "row":
        row(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: virtual_vs_real.py calibrate REAL | row LABEL REAL VIRTUAL")
