"""A parameter-server run's applied updates per second, two ways.

  python3 bench/ps_rates.py RUN_DIR     ->  "<whole> <concurrent>"

whole: every worker's steps over the job's training time (summary.json),
which ends with the slowest worker alone once the others have done their
steps. concurrent: the updates applied while every worker still runs,
over that time: the steps each worker had taken by the moment the first
one finished (metrics.jsonl's step records, linear between two records),
divided by that moment. bench/torch_rpc_ps.py reads its server's rate
when its rank 1 finishes, its two workers (alike, both remote) still
running: the concurrent figure is that measure for a job whose workers
are not alike (the shard beside one of them)."""
import json
import sys


def steps_at(points, t):
    """Cumulative steps at time t from (time, step) points, linear between them."""
    prev = (0.0, 0)
    for pt in points:
        if pt[0] >= t:
            span = pt[0] - prev[0]
            return prev[1] + (pt[1] - prev[1]) * ((t - prev[0]) / span if span > 0 else 1.0)
        prev = pt
    return prev[1]


def main(run):
    summary = json.load(open(f"{run}/summary.json"))
    workers = summary["per_worker"]
    whole = sum(w["steps"] for w in workers) / summary["train_seconds"]
    points = {w["worker"]: [] for w in workers}
    for line in open(f"{run}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("type") == "step" and r.get("worker") in points:
            points[r["worker"]].append((r["time"], r["step"]))
    if any(not p for p in points.values()):
        sys.exit(f"{run}: a worker without step records in metrics.jsonl")
    for p in points.values():
        p.sort()
    first_end = min(p[-1][0] for p in points.values())
    concurrent = sum(steps_at(p, first_end) for p in points.values()) / first_end
    print(f"{whole:.1f} {concurrent:.1f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
