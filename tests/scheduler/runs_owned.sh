#!/usr/bin/env bash
# A results folder is owned by one run, and runs never mix:
#  - `--out` refuses `/`, the home folder and a folder holding files that
#    gradwire did not write, with or without --force (which leaves them);
#  - a run with checkpoints, then another config with --force into the same
#    folder: nothing of the first survives (checkpoints included), and its
#    checkpoints put back by hand are refused by --resume, naming both runs'
#    ids (config.toml, summary.json and every manifest carry the run id);
#  - a resumed run's metrics.jsonl holds each step once (one worker, and a
#    ring of 3), and its resume record says how many records it replaced;
#  - a record copied from another run is refused by replay, naming both ids;
#  - compare never writes into a run's folder, and never replaces an earlier
#    comparison without --force; export refuses a missing folder and a
#    metrics.jsonl with no records, leaving the earlier tb/ as it was.
# Usage: runs_owned.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$(realpath "${1:?usage: runs_owned.sh GRADWIRE SOURCE_DIR}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
# refused NAME 'EXPECTED (extended regex)' gradwire args...: exit 2 and the message.
refused() {
  local name=$1 want=$2 rc=0
  shift 2
  timeout 120 "$gw" "$@" > "$name.txt" 2>&1 || rc=$?
  if [[ $rc -ne 2 ]] || ! grep -qE -- "$want" "$name.txt"; then
    bad "$name: exit $rc (want 2), expected /$want/, got: $(tail -3 "$name.txt")"
  else
    echo "ok: $name refused"
  fi
}
ok() { # NAME gradwire args...: exit 0
  local name=$1
  shift
  timeout 300 "$gw" "$@" > "$name.txt" 2>&1 || bad "$name failed: $(tail -3 "$name.txt")"
}
json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }
toml_id() { sed -n "s/^run_id = [\"']\(.*\)[\"']\$/\1/p" "$1/config.toml"; }

printf '[train]\nmax_steps = 12\nlog_every = 1\nbatch_size = 32\n[data]\ndataset = "synthetic"\nsynthetic_train = 512\nsynthetic_test = 64\n' > a.toml
printf '[train]\nmax_steps = 6\nlr = 0.02\nlog_every = 1\nbatch_size = 32\n[data]\ndataset = "synthetic"\nsynthetic_train = 512\nsynthetic_test = 64\n' > b.toml
q=(-q --no-report)

# Folders that are not a run's to take.
refused out_root "results folder / is the file system's root" run a.toml "${q[@]}" --out /
mkdir -p home
HOME=$tmp/home refused out_home "is the home folder" run a.toml "${q[@]}" --out "$tmp/home"
mkdir -p mine && echo "notes" > mine/notes.txt
refused out_foreign "holds files that gradwire did not write \('notes.txt'\)" run a.toml "${q[@]}" --out mine
refused out_foreign_force "holds files that gradwire did not write" run a.toml "${q[@]}" --out mine --force
[[ -f mine/notes.txt && ! -e mine/config.toml ]] || bad "--force touched a folder of the user's: $(ls mine)"

# Run A with checkpoints, cut short (its summary removed, as a kill leaves it).
ok run_a run a.toml "${q[@]}" --out dir --set train.checkpoint_every=4 --set train.keep_checkpoints=10
id_a=$(toml_id dir)
[[ -n $id_a && $(json dir/summary.json '["run_id"]') == "$id_a" ]] ||
  bad "run A: config.toml's run_id '$id_a' is not summary.json's"
[[ $(json dir/checkpoints/step-000000004/MANIFEST.json '["identity"]["run"]') == "$id_a" ]] ||
  bad "run A: the checkpoint's manifest does not name run $id_a"
cp -r dir/checkpoints a-checkpoints
rm dir/summary.json
# Run B, another config, --force into the same folder: nothing of A is left.
ok run_b run b.toml "${q[@]}" --out dir --force
id_b=$(toml_id dir)
[[ -n $id_b && $id_b != "$id_a" ]] || bad "run B got run A's id ($id_b)"
[[ ! -e dir/checkpoints ]] || bad "--force left run A's checkpoints: $(ls dir/checkpoints)"
refused resume_none "no complete checkpoint under dir/checkpoints" run --resume dir "${q[@]}"
# A's checkpoints put back into B's folder by hand: refused, naming both runs.
cp -r a-checkpoints dir/checkpoints
refused resume_other "the checkpoint is of run $id_a, and this folder's run is $id_b" run --resume dir "${q[@]}"

# A resumed run holds each step once: one worker, resumed from step 4 of 12.
ok full run a.toml "${q[@]}" --out one --set train.checkpoint_every=4 --set train.keep_checkpoints=10
rm one/summary.json
ok resumed run --resume one --from-step 4 "${q[@]}"
# each_step_once DIR: every (worker, step) of the step records once, up to the last step, and the resume record's count.
each_step_once() {
  python3 - "$1" "$2" <<'PY' || bad "$1: $(cat "$1.check" 2>/dev/null)"
import json, sys, collections
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
steps = collections.Counter((r.get("worker", 0), r["step"]) for r in recs if r.get("type") == "step")
twice = [k for k, n in steps.items() if n > 1]
resume = [r for r in recs if r.get("type") == "resume"]
want = int(sys.argv[2])
msg = ""
if twice: msg = f"steps written twice: {twice[:5]}"
elif len(resume) != 1 or resume[0].get("superseded", 0) <= 0: msg = f"resume records: {resume}"
elif max(s for _, s in steps) != want: msg = f"last step {max(s for _, s in steps)}, want {want}"
elif any(r.get("type") == "step" and r["step"] <= 4 and i > recs.index(resume[0]) for i, r in enumerate(recs)):
    msg = "a step at or before the checkpoint after the resume record"
open(sys.argv[1] + ".check", "w").write(msg)
sys.exit(1 if msg else 0)
PY
}
each_step_once one 12
# A ring of 3 workers, resumed from step 4.
ring=(--set topology.kind=\"ring\" --set topology.workers=3)
ok ring_full run a.toml "${q[@]}" "${ring[@]}" --out ring --set train.checkpoint_every=4 --set train.keep_checkpoints=10
rm ring/summary.json
ok ring_resumed run --resume ring --from-step 4 "${q[@]}"
each_step_once ring 12

# Replay: a record copied from another run is refused.
ps=(--set topology.kind=\"parameter-server\" --set topology.ps.mode=\"async\" --set topology.workers=2 --set topology.ps.shards=1)
ok ps1 run a.toml "${q[@]}" "${ps[@]}" --out ps1
ok ps2 run b.toml "${q[@]}" "${ps[@]}" --out ps2
cp ps2/record/shard-0.gwr ps1/record/shard-0.gwr
refused replay_other "shard-0.gwr: the record of run $(toml_id ps2), but this folder's run is $(toml_id ps1)" replay ps1 "${q[@]}"

# compare writes only into a folder of its own.
refused compare_into_run "compare --out one: that is a run's or a sweep's results folder" compare one ring --out one
refused compare_inside_run "that is inside a run's or a sweep's results folder" compare one ring --out one/cmp
ok compare_first compare one ring --out cmp
[[ -f cmp/report.html && -f cmp/compare.json ]] || bad "compare wrote no report.html and compare.json: $(ls cmp)"
refused compare_again "already holds a comparison \(report.html\): nothing is replaced" compare one ring --out cmp
ok compare_force compare one ring --out cmp --force
echo "notes" > cmp/notes.txt
refused compare_foreign "holds files that are not a comparison's \('notes.txt'\)" compare one ring --out cmp --force

# export: a missing folder, a metrics.jsonl with nothing in it.
refused export_missing "nowhere: no such folder" export --tensorboard nowhere
ok export_first export --tensorboard one
mkdir -p empty && : > empty/metrics.jsonl
refused export_empty "empty/metrics.jsonl holds no step or eval record" export --tensorboard empty
[[ ! -e empty/tb ]] || bad "export of an empty metrics.jsonl wrote tb/"
cp one/metrics.jsonl one/metrics.keep && head -c 20 one/metrics.keep > one/metrics.jsonl
refused export_torn "one/metrics.jsonl holds no step or eval record" export --tensorboard one
[[ -d one/tb ]] || bad "a failed export removed the earlier tb/"

[[ $fail -eq 0 ]] && echo "runs owned: every case passed"
exit $fail
