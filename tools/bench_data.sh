#!/usr/bin/env bash
# Streaming benchmark: trains the default job (gemma3-small, 8 x 256
# tokens a step) on a corpus of .gtok shards of at least 2 GB and on one of
# 256 MB, and prints for each the process's resident memory (VmRSS, sampled
# from /proc/<pid>/status) over the run, the time to open (every shard is
# checked once), and the data path's share of the step time: the trace's
# "data loading" spans (gt_data_read_train and the copy into the trainer's
# batch, profiler=trace over the last steps) against the step time of the
# untraced steps (metrics.jsonl). The corpora are the King James Bible's
# byte tokens repeated, one document per copy, written by python into a
# scratch directory that is removed at the end.
#
# Usage: tools/bench_data.sh [build dir (build)] [GB (2.1)] [steps (60)] [compress (false)]
# Needs: python3, data/kjv.txt (tools/kjv.sh), free disk in $TMPDIR.
set -euo pipefail
build="${1:-build}"; gb="${2:-2.1}"; steps="${3:-60}"; compress="${4:-false}"
bin="$build/gemtrain"
[ -x "$bin" ] || { echo "bench_data: no $bin (build first)"; exit 2; }
[ -s data/kjv.txt ] || tools/kjv.sh > /dev/null
tmp="${TMPDIR:-/tmp}"
need_kb=$(python3 -c "print(int(($gb + 0.3) * 1e6 * 1.05))")
free_kb=$(df -Pk "$tmp" | awk 'NR == 2 {print $4}')
[ "$free_kb" -gt "$need_kb" ] || { echo "bench_data: $tmp has $((free_kb / 1048576)) GiB free; need $((need_kb / 1048576 + 1))"; exit 2; }
work=$(mktemp -d "$tmp/gt_bench_data.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE

# make_corpus DIR BYTES: shards of 16M tokens (64 MB), uncompressed or zlib
make_corpus() {
  python3 - "$1" "$2" "$compress" <<'EOF'
import array, os, struct, sys, zlib
out, total, comp = sys.argv[1], int(float(sys.argv[2])), sys.argv[3] == "true"
os.makedirs(out)
ids = array.array("I", [2])  # <bos> the Bible <eos>
ids.extend(b + 4 for b in open("data/kjv.txt", "rb").read())
ids.append(1)
if sys.byteorder != "little":
    ids.byteswap()
doc = ids.tobytes()
per = (1 << 24) * 4
left = total // 4 * 4
k = 0
while left > 0:
    n = min(per, left)
    start = (k * per) % len(doc)
    reps = (start + n) // len(doc) + 1
    raw = (doc * reps)[start:start + n]
    crc = zlib.crc32(raw) & 0xFFFFFFFF
    payload = zlib.compress(raw, 1) if comp else raw
    with open(f"{out}/shard-{k:05d}.gtok", "wb") as f:
        f.write(b"GTOK" + struct.pack("<IIIQQI", 1, 1 if comp else 0, 260, n // 4, len(payload), crc))
        f.write(payload)
    left -= n
    k += 1
EOF
}

# run NAME DIR: trains, samples VmRSS every 2 s, prints the figures
run() {
  local name="$1" dir="$2"
  local log="$work/$name.log" rss="$work/$name.rss"
  local t0; t0=$(date +%s.%N)
  "$bin" train dataset_type=tokens "dataset_path=$dir" steps="$steps" eval_interval=-1 sample_tokens=0 \
    enable_checkpointing=false enable_tensorboard=false profiler=trace profiler_steps=20 \
    skip_first_n_steps_for_profiler=$((steps - 20)) "base_output_directory=$work/runs" run_name="$name" > "$log" 2>&1 &
  local pid=$!
  : > "$rss"
  while kill -0 "$pid" 2> /dev/null; do
    local kb; kb=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2> /dev/null || true)
    [ -n "$kb" ] && echo "$(date +%s.%N) $kb" >> "$rss"
    sleep 2
  done
  wait "$pid" || { tail -5 "$log"; echo "bench_data: the $name run failed"; exit 1; }
  python3 - "$name" "$dir" "$t0" "$rss" "$work/runs/$name/metrics.jsonl" "$work/runs/$name/trace.json" "$log" <<'EOF'
import json, os, sys
name, d, t0, rss_f, met_f, trace_f, log_f = sys.argv[1:]
t0 = float(t0)
import struct
size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
tokens = sum(struct.unpack("<Q", open(os.path.join(d, f), "rb").read(24)[16:24])[0] for f in os.listdir(d))
rss = [(float(t) - t0, int(kb) / 1024) for t, kb in (l.split() for l in open(rss_f))]
rows = [json.loads(l) for l in open(met_f)]
ev = json.load(open(trace_f))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
data = [e["dur"] / 1e6 for e in ev if e.get("name") == "data loading" and e.get("ph") == "X"]
traced = len(data)
step = [r["seconds"] for r in rows[1:len(rows) - traced]] or [r["seconds"] for r in rows]
mean_step = sum(step) / len(step)
mean_data = sum(data) / max(1, len(data))
first = next((l for l in open(log_f) if l.startswith("completed step: 0,")), None)
print(f"\n{name}: {tokens * 4 / 1e9:.2f} GB of tokens ({tokens} ids) in {len(os.listdir(d))} shards of "
      f"{size / 1e9:.2f} GB on disk, {len(rows)} steps")
print("  VmRSS (MiB) over the run:")
for i in range(0, len(rss), max(1, len(rss) // 12)):
    print(f"    t = {rss[i][0]:6.1f} s  {rss[i][1]:7.1f}")
print(f"    t = {rss[-1][0]:6.1f} s  {rss[-1][1]:7.1f}  (last sample)")
late = [m for t, m in rss if t > rss[-1][0] * 0.3]
print(f"  VmRSS after the first 30% of the run: min {min(late):.1f}, max {max(late):.1f} MiB")
print(f"  step time {mean_step * 1e3:.1f} ms (mean of {len(step)} untraced steps); data loading "
      f"{mean_data * 1e3:.3f} ms a step (mean of {len(data)} traced steps, max {max(data) * 1e3:.3f} ms): "
      f"{100 * mean_data / mean_step:.3f}% of the step")
EOF
  grep -m1 '^data: ' "$log" | sed 's/^/  /'
  # the data path alone: open (every shard checked once) and 2000 batches
  local a b; a=$(date +%s.%N)
  "$bin" data dataset_type=tokens "dataset_path=$dir" eval_interval=-1 --time 2000 | tail -1 | sed 's/^/  gemtrain data --time: /'
  b=$(date +%s.%N)
  python3 -c "print(f'  gemtrain data: open + 2000 batches took {$b - $a:.2f} s')"
}

echo "bench_data: writing $gb GB of tokens and 0.26 GB (compress=$compress) under $work"
make_corpus "$work/big" "$(python3 -c "print(int($gb * 1e9))")"
make_corpus "$work/small" 268435456
run small "$work/small"
run big "$work/big"
