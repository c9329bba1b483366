#!/usr/bin/env bash
# End-to-end: gemtrain sweep runs a small real sweep on gemma3-tiny (a 2 x 2
# grid that trains, one point over memory_limit_bytes, which its process
# refuses with exit status 3, one refused override), records every status in
# results.jsonl, writes the table and the plot, and a rerun runs nothing
# twice; an interrupted sweep runs only what is missing; a dry run decides
# the plan in-process and writes nothing; a hung point is killed at
# point_timeout_s while another runs beside it; a bad sweep file is refused
# with one line. A point's directory is its own: changed settings move an
# earlier run aside, an interrupted point resumes its checkpoint and keeps
# its metrics; an edited base.config makes other points; a point renumbered
# by an inserted grid value keeps its run, log and record; a second sweep
# on a directory in use is refused naming the first's pid, and a point
# directory held by another run is left alone.
# Usage: e2e_sweep.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_sweep.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat > "$work/tiny.json" <<'EOF'
{
  "base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic", "eval_interval": -1, "threads_per_device": 1}},
  "grid": {"remat_policy": ["full", "none"], "num_vocab_tiling": [1, 2]},
  "points": [{"memory_limit_bytes": 1000000}, {"steps": 0}],
  "steps": 3,
  "metrics": ["median_step_seconds", "tokens_per_s_per_device", "final_loss", "planned_peak_bytes", "measured_peak_bytes"],
  "sort_by": "planned_peak_bytes",
  "plot": {"x": "num_vocab_tiling", "y": "median_step_seconds"}
}
EOF
# the command line reaches every point (and wins over the file): 2 steps
# would be a different sweep, so learning_rate is what it sets here
# two points do not end ok (5 does not fit, 6 is refused): the sweep says so
# and exits 1
rc=0
(cd "$work" && "$bin" sweep tiny.json base_output_directory=out learning_rate=0.003) > "$work/first.txt" || rc=$?
[ "$rc" = 1 ] || { cat "$work/first.txt"; fail "the sweep with 2 points not ok exited $rc, expected 1"; }
grep -q '^sweep: 2 of 6 points did not end ok (results.md says why); exit status 1' "$work/first.txt" \
  || { cat "$work/first.txt"; fail "no line for the points not ok"; }
d="$work/out/tiny"
for f in results.jsonl results.md plot.svg runs/point-1.log runs/point-4/metrics.jsonl; do
  [ -s "$d/$f" ] || fail "missing $f"
done
grep -q '^point 6/6: steps=0 -> config_error' "$work/first.txt" || { cat "$work/first.txt"; fail "no progress line for point 6"; }
grep -q '^point 1/6: remat_policy=full num_vocab_tiling=1 -> ok ([0-9.]* s), ETA [0-9][0-9]:[0-9][0-9]$' "$work/first.txt" \
  || { cat "$work/first.txt"; fail "progress line format"; }
grep -q '^point 5/6: memory_limit_bytes=1000000 -> does_not_fit' "$work/first.txt" || { cat "$work/first.txt"; fail "no progress line for point 5"; }
# point 5 ran (its process decided it does not fit); point 6 never started
grep -q 'ran 5, skipped 0; 4 of 6 points ok' "$work/first.txt" || { cat "$work/first.txt"; fail "first summary"; }

python3 - "$d/results.jsonl" "$d/runs" <<'EOF' || fail "results.jsonl"
import json, sys
recs = {r["point"]: r for r in map(json.loads, open(sys.argv[1]))}
assert sorted(recs) == [1, 2, 3, 4, 5, 6], sorted(recs)
want = {1: "ok", 2: "ok", 3: "ok", 4: "ok", 5: "does_not_fit", 6: "config_error"}
for k, s in want.items():
    assert recs[k]["status"] == s, (k, recs[k]["status"], recs[k]["reason"])
for k in (1, 2, 3, 4):
    r = recs[k]
    assert r["steps_done"] == 3 and r["median_step_seconds"] > 0 and r["tokens_per_s_per_device"] > 0, r
    assert r["tflops_per_s_per_device"] > 0 and r["final_loss"] > 0, r
    # the plan is exact: measured peak = planned peak
    assert r["measured_peak_bytes"] == r["planned_peak_bytes"] > 0, r
    assert r["overrides"]["learning_rate"] == "0.003" and r["overrides"]["steps"] == "3", r["overrides"]
    assert r["log"] == "runs/point-%d.log" % k
    # the rates are those of the median step time: tokens/s x seconds is a
    # step's tokens, TFLOP/s x seconds its TFLOP (metrics.jsonl's
    # tokens_per_device and tflops_per_device)
    step = json.loads(open("%s/point-%d/metrics.jsonl" % (sys.argv[2], k)).readline())
    tokens, tflop = step["tokens_per_device"], step["tflops_per_device"]
    assert abs(r["tokens_per_s_per_device"] * r["median_step_seconds"] - tokens) < 1e-6 * tokens, (r, tokens)
    assert abs(r["tflops_per_s_per_device"] * r["median_step_seconds"] - tflop) < 1e-6 * tflop, (r, tflop)
# remat never changes the numbers (vocab tiling only the summation order)
losses = [recs[k]["final_loss"] for k in (1, 2, 3, 4)]
assert recs[1]["final_loss"] == recs[3]["final_loss"] and max(losses) - min(losses) < 1e-5, losses
# remat_policy=none keeps more than full
assert recs[3]["planned_peak_bytes"] > recs[1]["planned_peak_bytes"]
r = recs[5]
assert r["planned_peak_bytes"] > 1000000 and r["measured_peak_bytes"] is None, r
# decided by `gemtrain train`'s exit status 3; the reason is its last error line
assert r["reason"].startswith("train: the plan needs") and "memory_limit_bytes" in r["reason"], r["reason"]
assert r["log"] == "runs/point-5.log" and r["steps_done"] == 0, r
assert "'steps' = 0" in recs[6]["reason"], recs[6]["reason"]
EOF
# point 5's process refused its plan before training: a log, no metrics;
# point 6 was refused in-process: no process, no log
grep -q '^gemtrain: train: the plan needs' "$d/runs/point-5.log" || fail "point 5's log lacks the refusal"
[ ! -e "$d/runs/point-5/metrics.jsonl" ] || fail "point 5 trained"
[ ! -e "$d/runs/point-6.log" ] || fail "point 6 was run"

# the table: one row per point, sorted by planned peak (missing last)
md="$d/results.md"
grep -q '^| point | remat_policy | num_vocab_tiling | memory_limit_bytes | steps | status | median_step_seconds | tokens_per_s_per_device | final_loss | planned_peak MiB | measured_peak MiB | note |$' "$md" \
  || { cat "$md"; fail "table header"; }
[ "$(grep -c '^| [0-9]' "$md")" = 6 ] || { cat "$md"; fail "table rows"; }
grep -q '^| 1 | full | 1 | 0 | 3 | ok | ' "$md" || { cat "$md"; fail "row 1"; }
grep -q '^| 5 | full | 1 | 1000000 | 3 | does_not_fit | - | - | - | [0-9.]* | - | train: the plan needs' "$md" || { cat "$md"; fail "row 5"; }
grep -q "^| 6 | - | - | - | 0 | config_error | .*'steps' = 0 is out of range" "$md" || { cat "$md"; fail "row 6"; }
grep -q '^Status: 4 ok, 1 does_not_fit, 1 config_error (median_step_seconds is the median over the steps after step 0; ' "$md" \
  || { cat "$md"; fail "status counts, or the steps the timings are over"; }
# ascending planned peak, the row without one (point 6) last
python3 - "$md" <<'EOF' || { cat "$md"; fail "table order"; }
import sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| ") and l[2].isdigit()]
planned = [r[9].strip() for r in rows]
assert rows[-1][0].strip() == "6" and planned[-1] == "-", rows[-1]
vals = [float(p) for p in planned[:-1]]
assert vals == sorted(vals), vals
EOF
grep -q '<svg' "$d/plot.svg" && grep -q 'polyline' "$d/plot.svg" && grep -q 'remat_policy=none' "$d/plot.svg" \
  || fail "plot.svg has no series per remat_policy"

# a dry run has no process to ask: it decides the plan in-process, runs and
# writes nothing
(cd "$work" && "$bin" sweep --dry-run tiny.json base_output_directory=dry learning_rate=0.003) > "$work/dry.txt" \
  || { cat "$work/dry.txt"; fail "the dry run failed"; }
grep -q 'dry run): 4 of 6 points would run, 0 skipped; nothing written' "$work/dry.txt" || { cat "$work/dry.txt"; fail "dry run summary"; }
grep -q '^| 5 | full | 1 | 1000000 | 3 | does_not_fit | .*| the plan needs' "$work/dry.txt" || { cat "$work/dry.txt"; fail "dry run row 5"; }
grep -q '^| 1 | full | 1 | 0 | 3 | would_run |' "$work/dry.txt" || { cat "$work/dry.txt"; fail "dry run row 1"; }
[ ! -e "$work/dry" ] || fail "the dry run wrote its directory"

# a point over load_parameters_path is planned with that source's model, as
# train and plan take it (not the default preset's)
"$bin" train model_name=gemma3-tiny base_emb_dim=96 dataset_type=synthetic steps=1 sample_tokens=0 run_name=src \
  "base_output_directory=$work/src_runs" > "$work/src.txt" 2>&1 || { cat "$work/src.txt"; fail "the source run"; }
cat > "$work/src.json" <<EOF
{"base": {"overrides": {"load_parameters_path": "$work/src_runs/src", "dataset_type": "synthetic", "eval_interval": -1}},
 "grid": {"learning_rate": [0.001]}, "steps": 1, "metrics": ["planned_peak_bytes"]}
EOF
want=$("$bin" plan "load_parameters_path=$work/src_runs/src" dataset_type=synthetic steps=1 \
  | sed -n 's/^  peak: \([0-9.]*\) MiB.*/\1/p')
(cd "$work" && "$bin" sweep --dry-run src.json) > "$work/srcdry.txt" || { cat "$work/srcdry.txt"; fail "the source dry run"; }
grep -q "^| 1 | 0.001 | would_run | $want |" "$work/srcdry.txt" \
  || { cat "$work/srcdry.txt"; fail "the point over load_parameters_path is not planned as gemtrain plan plans it ($want MiB)"; }

# a rerun runs nothing twice
stamp() { stat -c '%y %n' "$d"/runs/*.log "$d"/runs/*/metrics.jsonl; }
stamp > "$work/stamps1"
sleep 1
(cd "$work" && "$bin" sweep tiny.json base_output_directory=out learning_rate=0.003) > "$work/second.txt" || [ $? = 1 ] # points 5 and 6 are not ok
grep -q 'ran 0, skipped 6; 4 of 6 points ok' "$work/second.txt" || { cat "$work/second.txt"; fail "the rerun ran points"; }
grep -q '^point ' "$work/second.txt" && fail "the rerun reported points"
stamp > "$work/stamps2"
cmp -s "$work/stamps1" "$work/stamps2" || fail "the rerun touched a point's log or metrics"
[ "$(wc -l < "$d/results.jsonl")" = 6 ] || fail "the rerun appended records"
[ "$(grep -c '^| [0-9]' "$d/results.md")" = 6 ] || fail "the rerun's table lost rows"

# a sweep directory moved elsewhere still knows its points
cp -r "$work/out" "$work/moved"
(cd "$work" && "$bin" sweep tiny.json base_output_directory=moved learning_rate=0.003) > "$work/moved.txt" || [ $? = 1 ] # points 5 and 6 are not ok
grep -q 'ran 0, skipped 6' "$work/moved.txt" || { cat "$work/moved.txt"; fail "the moved sweep ran points"; }

# an interrupted sweep (its last record missing) runs only that point
head -n 5 "$d/results.jsonl" > "$work/r" && mv "$work/r" "$d/results.jsonl"
missing=$(python3 -c "import json,sys; print(sorted({1,2,3,4,5,6} - {json.loads(l)['point'] for l in open(sys.argv[1])})[0])" "$d/results.jsonl")
(cd "$work" && "$bin" sweep tiny.json base_output_directory=out learning_rate=0.003) > "$work/third.txt" || [ $? = 1 ] # points 5 and 6 are not ok
grep -q 'ran [01], skipped 5; 4 of 6 points ok' "$work/third.txt" || { cat "$work/third.txt"; fail "the restart"; }
grep -q "^point $missing/6: " "$work/third.txt" || { cat "$work/third.txt"; fail "the restart did not redo point $missing"; }
[ "$(grep -c '^point ' "$work/third.txt")" = 1 ] || fail "the restart redid more than one point"
# other command-line keys are another sweep: every point runs again
(cd "$work" && "$bin" sweep tiny.json base_output_directory=out learning_rate=0.004) > "$work/fourth.txt" || [ $? = 1 ] # points 5 and 6 are not ok
grep -q "ran 5, skipped 0" "$work/fourth.txt" || { cat "$work/fourth.txt"; fail "changed overrides were skipped"; }
# ... and a point never resumes another sweep's run: the earlier run of
# point 1 (learning_rate 0.003, 3 steps done, a checkpoint at step 3) is
# moved aside whole, and point 1 trains its 3 steps afresh
grep -q "^sweep: runs/point-1 held a run of other settings; moved it to .*/runs/point-1.previous-1$" "$work/fourth.txt" \
  || { cat "$work/fourth.txt"; fail "the earlier point 1 was not moved aside"; }
[ -s "$d/runs/point-1.previous-1/metrics.jsonl" ] && [ -e "$d/runs/point-1.previous-1/checkpoints/latest" ] \
  || fail "the earlier point 1's files were not kept"
grep -qi 'resum' "$d/runs/point-1.log" && { cat "$d/runs/point-1.log"; fail "point 1 resumed another sweep's run"; }
python3 - "$d/results.jsonl" "$d/runs/point-1.previous-1/metrics.jsonl" "$d/runs/point-1/metrics.jsonl" <<'PY' \
  || fail "point 1 after changed overrides"
import json, sys
last = {}
for r in map(json.loads, open(sys.argv[1])):
    last[r["point"]] = r
r = last[1]
assert r["status"] == "ok" and r["steps_done"] == 3 and r["overrides"]["learning_rate"] == "0.004", r
old = [json.loads(l)["loss"] for l in open(sys.argv[2])]
new = [json.loads(l)["loss"] for l in open(sys.argv[3])]
# step 0's loss is the initialisation's; the learning rate shows from step 1
assert len(new) == 3 and new[0] == old[0] and new[2] != old[2], (old, new)
PY

# an interrupted point resumes its checkpoint and keeps its metrics: point 1
# stopped after its step-2 checkpoint (as a killed sweep leaves it: the
# later checkpoint never written, the point not recorded); the restart
# trains steps 2 and 3 only, and metrics.jsonl keeps steps 0 and 1 as the
# first attempt wrote them
cat > "$work/resume.json" <<'JSON'
{
  "base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic", "eval_interval": -1,
                         "threads_per_device": 1, "checkpoint_period": 2}},
  "points": [{}],
  "steps": 4,
  "output_directory": "resume_out"
}
JSON
(cd "$work" && "$bin" sweep resume.json) > "$work/resume1.txt" || { cat "$work/resume1.txt"; fail "resume sweep"; }
rd="$work/resume_out/runs/point-1"
[ -d "$rd/checkpoints/step_00000004" ] && [ -d "$rd/checkpoints/step_00000002" ] || fail "no step-2 and step-4 checkpoints"
rm -rf "$rd/checkpoints/step_00000004"
printf 'step_00000002' > "$rd/checkpoints/latest"
: > "$work/resume_out/results.jsonl"
head -n 2 "$rd/metrics.jsonl" > "$work/first_two"
(cd "$work" && "$bin" sweep resume.json) > "$work/resume2.txt" || { cat "$work/resume2.txt"; fail "resumed sweep"; }
grep -q 'ran 1, skipped 0; 1 of 1 point ok' "$work/resume2.txt" || { cat "$work/resume2.txt"; fail "the resumed point"; }
# (the log keeps both attempts: 4 steps, then the 2 after the resume)
[ "$(sed -n '/^resumed from/,$p' "$work/resume_out/runs/point-1.log" | grep -c '^completed step')" = 2 ] \
  && [ "$(grep -c '^completed step' "$work/resume_out/runs/point-1.log")" = 6 ] \
  || { cat "$work/resume_out/runs/point-1.log"; fail "the point did not resume at step 2"; }
[ "$(wc -l < "$rd/metrics.jsonl")" = 4 ] || { cat "$rd/metrics.jsonl"; fail "the resumed point's metrics lost steps"; }
head -n 2 "$rd/metrics.jsonl" | cmp -s - "$work/first_two" || fail "the resumed point rewrote steps 0 and 1"
python3 - "$work/resume_out/results.jsonl" <<'PY' || fail "the resumed point's record"
import json, sys
(r,) = map(json.loads, open(sys.argv[1]))
assert r["status"] == "ok" and r["steps_done"] == 4, r
PY

# a point is its whole configuration: the same keys over an edited
# base.config run again, the earlier runs kept aside with their logs; a
# value inserted into the grid runs alone, and the point after it keeps its
# run, its log and its record under its new number
printf '{"model_name": "gemma3-tiny", "dataset_type": "synthetic", "eval_interval": -1, "threads_per_device": 1, "max_target_length": 32}\n' \
  > "$work/cfg.json"
cfg_sweep() { # learning rates
  printf '{"base": {"config": "cfg.json"}, "grid": {"learning_rate": [%s]}, "steps": 2, "output_directory": "cfg_out"}' "$1" \
    > "$work/cfg_sweep.json"
  (cd "$work" && "$bin" sweep cfg_sweep.json) > "$work/cfg.txt" || { cat "$work/cfg.txt"; fail "the sweep over cfg.json"; }
}
cfg_sweep "0.001, 0.01"
sed -i 's/: 32}/: 64}/' "$work/cfg.json"
cfg_sweep "0.001, 0.01"
grep -q 'ran 2, skipped 0' "$work/cfg.txt" || { cat "$work/cfg.txt"; fail "an edited base.config reused the earlier records"; }
c="$work/cfg_out/runs"
[ -s "$c/point-1.previous-1.log" ] && grep -Eq '"max_target_length":[[:space:]]*32,' "$c/point-1.previous-1/config.json" \
  && grep -Eq '"max_target_length":[[:space:]]*64,' "$c/point-1/config.json" || fail "the earlier point 1 was not kept aside with its log"
cfg_sweep "0.001, 0.005, 0.01"
grep -q 'ran 1, skipped 2' "$work/cfg.txt" || { cat "$work/cfg.txt"; fail "the inserted value"; }
grep -q "^sweep: runs/point-2 holds point 3's run (its settings); moved it to .*/runs/point-3$" "$work/cfg.txt" \
  || { cat "$work/cfg.txt"; fail "point 3's run was not moved to its number"; }
python3 - "$work/cfg_out/results.jsonl" "$c" <<'PY' || fail "the renumbered point"
import json, sys
last = {}
for r in map(json.loads, open(sys.argv[1])):
    last[r["point"]] = r
for k, lr in ((1, "0.001"), (2, "0.005"), (3, "0.01")):
    r = last[k]
    assert r["status"] == "ok" and r["overrides"]["learning_rate"] == lr and r["log"] == "runs/point-%d.log" % k, r
    assert r["identity"].startswith("cfg-"), r
    cfg = json.load(open("%s/point-%d/config.json" % (sys.argv[2], k)))
    assert abs(cfg["learning_rate"] - float(lr)) < 1e-12 and cfg["max_target_length"] == 64, (k, cfg["learning_rate"])
    assert open("%s/point-%d.log" % (sys.argv[2], k)).read().count("completed step") == 2, k
PY

# two sweeps on one directory: the second is refused at once naming the
# first's pid, and touches nothing
cat > "$work/long.json" <<'JSON'
{
  "base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic", "eval_interval": -1,
                         "threads_per_device": 1, "enable_checkpointing": false}},
  "points": [{"steps": 1000000}, {"steps": 2}],
  "point_timeout_s": 3600
}
JSON
wait_line() { # file pid: wait (up to 300 s) until the file holds a line, while the process lives
  for _ in $(seq 3000); do
    grep -q . "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || fail "process $2 ended before '$1' got a line"
    sleep 0.1
  done
  fail "'$1' never got a line"
}
(cd "$work" && exec "$bin" sweep long.json base_output_directory=long_base) > "$work/longA.txt" 2>&1 &
apid=$!
wait_line "$work/long_base/long/runs/point-1/metrics.jsonl" $apid
set +e; (cd "$work" && "$bin" sweep long.json base_output_directory=long_base) > "$work/longB.txt" 2>&1; brc=$?; set -e
n_after=$( (wc -l < "$work/long_base/long/runs/point-1/metrics.jsonl") 2>/dev/null || echo 0)
kill -KILL $apid; wait $apid 2>/dev/null || true
[ $brc != 0 ] || { cat "$work/longB.txt"; fail "a second sweep on the same directory exited 0"; }
grep -q "^gemtrain: sweep: sweep directory '.*long_base/long' is in use by another gemtrain (pid $apid)" "$work/longB.txt" \
  || { cat "$work/longB.txt"; fail "the second sweep's refusal does not name the first's pid ($apid)"; }
grep -q '^point ' "$work/longB.txt" && fail "the refused sweep ran points"
[ "$n_after" -ge 1 ] || fail "the refused sweep deleted a running point's metrics"

# a point's files are only touched under its run lock: a run by hand that
# holds point 1's directory keeps its metrics, and the sweep records point
# 1 failed, naming that run's pid
mkdir -p "$work/hand_base/long/runs"
(cd "$work" && exec "$bin" train model_name=gemma3-tiny dataset_type=synthetic eval_interval=-1 threads_per_device=1 \
  enable_checkpointing=false sample_tokens=0 steps=1000000 run_name=point-1 base_output_directory=hand_base/long/runs) \
  > "$work/hand.txt" 2>&1 &
hpid=$!
wait_line "$work/hand_base/long/runs/point-1/metrics.jsonl" $hpid
set +e; (cd "$work" && "$bin" sweep long.json base_output_directory=hand_base) > "$work/handsweep.txt" 2>&1; hrc=$?; set -e
n_after=$( (wc -l < "$work/hand_base/long/runs/point-1/metrics.jsonl") 2>/dev/null || echo 0)
kill -KILL $hpid; wait $hpid 2>/dev/null || true
[ $hrc = 1 ] || { cat "$work/handsweep.txt"; fail "the sweep beside a run by hand exited $hrc, expected 1 (point 1 failed)"; }
[ "$n_after" -ge 1 ] || fail "the sweep deleted the metrics of a run it does not hold"
[ ! -e "$work/hand_base/long/runs/point-1/sweep_point.txt" ] || fail "the sweep wrote into a point directory it does not hold"
python3 - "$work/hand_base/long/results.jsonl" "$hpid" <<'PY' || { cat "$work/handsweep.txt"; fail "the held point's record"; }
import json, sys
recs = {r["point"]: r for r in map(json.loads, open(sys.argv[1]))}
r = recs[1]
assert r["status"] == "failed" and "in use by another gemtrain (pid %s)" % sys.argv[2] in r["reason"], r
assert recs[2]["status"] == "ok", recs[2]
PY

# a hung point is killed at point_timeout_s while another runs beside it;
# a failing run keeps its last error line
cat > "$work/hang.json" <<'EOF'
{
  "base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic", "eval_interval": -1}},
  "points": [{"steps": 10000000}, {"steps": 2}, {"dataset_type": "text", "dataset_path": "/nonexistent/corpus.txt"}],
  "max_parallel": 2, "point_timeout_s": 2,
  "output_directory": "hang_out"
}
EOF
t0=$(date +%s)
(cd "$work" && "$bin" sweep hang.json) > "$work/hang.txt" || [ $? = 1 ] # points 1 and 3 are not ok
t1=$(date +%s)
[ $((t1 - t0)) -lt 10 ] || fail "the timeout did not stop the hung point"
python3 - "$work/hang_out/results.jsonl" <<'EOF' || { cat "$work/hang.txt"; fail "hang results"; }
import json, sys
recs = {r["point"]: r for r in map(json.loads, open(sys.argv[1]))}
assert recs[1]["status"] == "timeout" and "point_timeout_s" in recs[1]["reason"], recs[1]
assert recs[2]["status"] == "ok", recs[2]
assert recs[3]["status"] == "failed" and "/nonexistent/corpus.txt" in recs[3]["reason"], recs[3]
EOF
# parallel points share the cores instead of each taking all of them
cores=$(getconf _NPROCESSORS_ONLN); per=$((cores / 2)); [ $per -ge 1 ] || per=1
grep -q "\"threads_per_device\":[[:space:]]*$per," "$work/hang_out/runs/point-2/config.json" \
  || fail "a parallel point does not run with threads_per_device=$per"

# refusals: one line, naming the file and the problem, exit 2, nothing run
refuse() { # expected-substring sweep-text [args]
  local want="$1" text="$2"; shift 2
  printf '%s' "$text" > "$work/bad.json"
  set +e; (cd "$work" && "$bin" sweep bad.json "$@") > "$work/out.log" 2> "$work/err.log"; local rc=$?; set -e
  [ $rc = 2 ] || fail "'$text' exit $rc"
  [ "$(wc -l < "$work/err.log")" = 1 ] || { cat "$work/err.log"; fail "'$text' printed more than one error line"; }
  grep -q -- "$want" "$work/err.log" || { cat "$work/err.log"; fail "'$text' error lacks '$want'"; }
}
refuse "'bad.json' is not valid JSON" '{"grid": '
refuse "grid key 'steps' must be a list of values" '{"grid": {"steps": 3}}'
refuse "unknown key 'gird'; did you mean 'grid'?" '{"gird": {"steps": [3]}}'
refuse "'bad.json' defines no points" '{"steps": 3}'
refuse "the base configuration (before any point's keys) is refused: config: unknown key 'learnin_rate'" \
  '{"points": [{}]}' learnin_rate=1
refuse "'run_name=x' is set by the sweep" '{"points": [{}]}' run_name=x
refuse "'learning_rate=0.5' sets 'learning_rate', which 'bad.json' sweeps" \
  '{"grid": {"learning_rate": [0.001, 0.01]}}' learning_rate=0.5
# an empty base_output_directory would put the sweep at the filesystem's
# root (a name of its own, removed if it gets there)
probe="gt_e2e_sweep_probe_$$"
printf '{"points": [{}]}' > "$work/$probe.json"
set +e; (cd "$work" && "$bin" sweep "$probe.json" base_output_directory=) > "$work/out.log" 2> "$work/err.log"; rc=$?; set -e
if [ -e "/$probe" ]; then rm -rf "/${probe:?}"; fail "an empty base_output_directory wrote /$probe"; fi
[ $rc = 2 ] || fail "an empty base_output_directory: exit $rc"
grep -q "key 'base_output_directory' is empty and '$probe.json' sets no output_directory" "$work/err.log" \
  || { cat "$work/err.log"; fail "the refusal of an empty base_output_directory"; }
[ ! -e "$work/runs" ] || fail "a refused sweep created its directory"
"$bin" sweep --help > "$work/help.txt" || fail "sweep --help exit status"
grep -q '^usage: gemtrain sweep' "$work/help.txt" && grep -q '3 does_not_fit' "$work/help.txt" || fail "sweep --help"
echo "e2e_sweep: 1 passed, 0 failed"
