"""A parameter-server run's applied updates per second, two ways.

  python3 bench/ps_rates.py RUN_DIR     ->  "<whole> <concurrent>"

whole: every worker's steps over the job's training time (summary.json),
which ends with the slowest worker alone once the others have done their
steps, and begins before the first update (connections, the first
forward pass).

concurrent: bench/torch_rpc_ps.py's measure. Its server counts updates
from the first push it receives and reports updates / time since then
when its rank 1 finishes, its two workers (alike, both remote) still
running. Here, from trace.json (every process's spans on one clock): the
updates shard 0 applied from the start of its first push to the moment
the first worker finished its last step, over that time. The job's
workers are not alike (the shard sits beside one of them), so the first
to finish is the one beside the shard, and the other runs on alone."""
import json
import sys


def tracks(trace):
    """{track name: [(begin_us, end_us, span name)]} of a trace.json."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    out = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            name = names.get((e["pid"], e["tid"]), "?")
            out.setdefault(name, []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    return out


def concurrent_rate(run):
    trace = json.load(open(f"{run}/trace.json"))
    if trace.get("otherData", {}).get("dropped_spans", 0):
        sys.exit(f"{run}/trace.json: spans were dropped (a longer run than the trace keeps)")
    t = tracks(trace)
    shard = t.get("shard 0")
    workers = [spans for name, spans in t.items() if name.startswith("worker ")]
    if not shard or len(workers) < 2:
        sys.exit(f"{run}/trace.json: needs shard 0's spans and at least 2 workers' (trace on?)")
    first_update = min(begin for begin, _, _ in shard)
    first_end = min(max(end for _, end, _ in spans) for spans in workers)
    updates = sum(1 for _, end, name in shard if name == "apply" and end <= first_end)
    return updates / ((first_end - first_update) * 1e-6)


def main(run):
    summary = json.load(open(f"{run}/summary.json"))
    whole = sum(w["steps"] for w in summary["per_worker"]) / summary["train_seconds"]
    print(f"{whole:.1f} {concurrent_rate(run):.1f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
