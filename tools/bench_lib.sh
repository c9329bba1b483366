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
