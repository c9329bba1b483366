# Shell helpers shared by the benchmark scripts in tools/ (sourced, not run).

# "tokens/s GFLOP/s" of the train-step line of a `gemtrain bench` output on stdin
gt_bench_figures() {
  sed -n 's/^train step (with clipping and AdamW): \([0-9.]*\) tokens\/s, \([0-9.]*\) GFLOP\/s.*/\1 \2/p'
}

# tokens/s alone
gt_bench_tokens() { gt_bench_figures | cut -d' ' -f1; }

# the median of the numbers on stdin (separated by blanks or newlines)
gt_median() {
  tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---- the section scripts (bench_perf.sh, bench_bf16.sh) ----
# gemtrain runs as a user runs it: no OpenMP variable (it picks its own wait)
gt_bench_no_omp_env() {
  for v in OMP_WAIT_POLICY GOMP_SPINCOUNT OMP_NUM_THREADS OMP_PROC_BIND OMP_PLACES GOMP_CPU_AFFINITY; do unset "$v"; done
}
# GT_LOCK=FILE: each section between lock and unlock holds `flock FILE`
if [ -n "${GT_LOCK:-}" ]; then exec 9> "$GT_LOCK"; fi
lock() { if [ -n "${GT_LOCK:-}" ]; then flock 9; fi; }
unlock() { if [ -n "${GT_LOCK:-}" ]; then flock -u 9; fi; }
section() { echo; echo "=== $* ($(date -u +%H:%M:%S), load average $(cut -d' ' -f1-3 /proc/loadavg))"; }
# is section $1 wanted? (the caller's $skip: " name name ")
wants() { case "$skip" in *" $1 "*) return 1 ;; *) return 0 ;; esac; }
# the machine, one line
gt_bench_cpu() {
  echo "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') (family $(grep -m1 '^cpu family' /proc/cpuinfo | awk '{print $NF}') model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | awk '{print $NF}')), $(nproc) cores, avx512_bf16: $(grep -qw avx512_bf16 /proc/cpuinfo && echo yes || echo no)"
}
