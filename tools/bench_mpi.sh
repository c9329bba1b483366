#!/usr/bin/env bash
# MPI ranks against in-process devices, side by side in one run on this machine:
#  - tokens/s of a 12-layer model on 2 MPI ranks x 1 device x 1 thread, on
#    1 process x 2 devices x 1 thread, and on 1 process x 1 device x 2 threads
#    (the same global batch);
#  - all-reduce / reduce-scatter of 64 MiB across 2 ranks next to the MPI
#    library's MPI_Allreduce (and between 2 devices of one process).
# Usage: tools/bench_mpi.sh [build/gemtrain] [key=value ...] (default model
# gemma3-12l, 5 timed steps). Needs mpirun (openmpi-bin) and an MPI build.
set -euo pipefail
bin=${1:-build/gemtrain}
[ $# -gt 0 ] && shift
keys=("$@")
[ ${#keys[@]} -gt 0 ] || keys=(model_name=gemma3-12l)
flags=(--bind-to core)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_WAIT_POLICY=PASSIVE
echo "== 2 ranks (mpirun -np 2 $bin bench mpi ${keys[*]}) =="
mpirun "${flags[@]}" -np 2 "$bin" bench mpi --steps 5 "${keys[@]}" | tee "$out/ranks.txt"
echo
echo "== 1 process ($bin bench mpi ${keys[*]}) =="
"$bin" bench mpi --steps 5 "${keys[@]}" | tee "$out/local.txt"
echo
python3 - "$out" <<'PY'
import re, sys
d = sys.argv[1]
r, l = open(f"{d}/ranks.txt").read(), open(f"{d}/local.txt").read()
tok = lambda s, what: float(re.search(r"tokens/s: ([\d.]+)  \(" + re.escape(what), s).group(1))
t_r = tok(r, "2 processes x 1 device x 1 thread")
t_d = tok(l, "1 process x 2 devices x 1 thread")
t_t = tok(l, "1 process x 1 device x 2 threads")
ar = float(re.search(r"\| gemtrain all_reduce \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ([\d.]+)x", r).group(1))
rs = float(re.search(r"\| gemtrain reduce_scatter \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ([\d.]+)x", r).group(1))
print("summary (one run of this script):")
print(f"  2 ranks x 1 thread: {t_r:.1f} tokens/s = {t_r / t_d:.2f}x of 1 process x 2 devices ({t_d:.1f}), "
      f"{t_r / t_t:.2f}x of 1 device x 2 threads ({t_t:.1f})   [goal >= 0.9x of 2 devices]")
print(f"  64 MiB all-reduce across 2 ranks: {ar:.2f}x MPI_Allreduce's time; reduce-scatter {rs:.2f}x   [goal <= 1.2x]")
PY
