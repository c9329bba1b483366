#!/usr/bin/env bash
# End-to-end: gemtrain's threads are its own (src/base/team.h). The program
# starts once (libgomp, still loaded with OpenBLAS, prints its settings from
# its constructor under OMP_DISPLAY_ENV=VERBOSE: one block per program
# start) and sets nothing in its environment; no OpenMP variable changes how
# many threads a run has or what it computes (the losses bit for bit with
# libgomp's variables set any way, and on 1 or 2 threads per device);
# signals and exit codes reach the parent as they are; and it works under
# mpirun. No timing is checked.
# Usage: e2e_threads.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_threads.XXXXXX)
pid=""
cleanup() { if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# every OpenMP variable out of the way: the case of a user who set none
clean=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS -u OMP_DISPLAY_ENV -u GEMTRAIN_WAIT_REEXEC)
starts() { grep -c "OPENMP DISPLAY ENVIRONMENT BEGIN" "$1" || true; }

# 1. one start, whatever the environment says
for u in "" GOMP_SPINCOUNT=300000 OMP_WAIT_POLICY=PASSIVE; do
  "${clean[@]}" OMP_DISPLAY_ENV=VERBOSE $u "$bin" --version > "$work/v.out" 2> "$work/v.err"
  [ "$(starts "$work/v.err")" = 1 ] || { cat "$work/v.err"; fail "${u:-no variable}: the program started $(starts "$work/v.err") times"; }
  [ "$(grep -c '^gemtrain ' "$work/v.out")" = 1 ] || fail "${u:-no variable}: --version printed $(grep -c '^gemtrain ' "$work/v.out") times"
done

# 2. a running training process: the pid its parent started, its environment
# as given, and as many threads with OMP_NUM_THREADS=8 as without
tiny=(model_name=gemma3-tiny dataset_type=synthetic sample_tokens=0 eval_interval=0 "base_output_directory=$work/runs")
threads_of() { # threads of a long run started with the given environment
  local tag=$1; shift
  : > "$work/long$tag.log"
  "${clean[@]}" "$@" "$bin" train "${tiny[@]}" steps=100000 checkpoint_period=1000000 threads_per_device=2 \
    run_name=long$tag > "$work/long$tag.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -q '^completed step: 2,' "$work/long$tag.log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/long$tag.log"; fail "the training run ended early"; }
    sleep 0.1
  done
  grep -q '^completed step: 2,' "$work/long$tag.log" || fail "the training run did not reach step 2"
  [ "$(readlink "/proc/$pid/exe")" = "$(readlink -f "$bin")" ] || fail "the running process is not gemtrain"
  tr '\0' '\n' < "/proc/$pid/environ" > "$work/environ$tag"
  ls "/proc/$pid/task" | wc -l > "$work/threads$tag"
}
threads_of a
! grep -q '^GOMP_SPINCOUNT=\|^OMP_WAIT_POLICY=\|^GEMTRAIN_WAIT_REEXEC=' "$work/environa" \
  || fail "the running process has an OpenMP wait variable it was not given"
# signals reach the same process: SIGTERM stops the run cleanly (exit 5, stopped)
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
[ "$rc" = 5 ] || { tail -5 "$work/longa.log"; fail "SIGTERM: exit $rc, expected 5"; }
grep -q 'SIGTERM' "$work/longa.log" || fail "the run did not report the SIGTERM"
threads_of b OMP_NUM_THREADS=8 GOMP_SPINCOUNT=300000
kill -KILL "$pid"; { wait "$pid" || true; } 2> /dev/null; pid=""
[ "$(cat "$work/threadsa")" = "$(cat "$work/threadsb")" ] \
  || fail "threads: $(cat "$work/threadsa") without OpenMP variables, $(cat "$work/threadsb") with OMP_NUM_THREADS=8"

# 3. the same losses whatever the environment, and on 1 or 2 threads
losses() { grep -o '"\(loss\|grad_norm\)": [0-9.e+-]*' "$work/runs/$1/metrics.jsonl"; }
"${clean[@]}" "$bin" train "${tiny[@]}" steps=3 threads_per_device=2 run_name=ref > "$work/ref.log" 2>&1 \
  || { cat "$work/ref.log"; fail "train failed"; }
losses ref > "$work/ref.loss"
[ -s "$work/ref.loss" ] || fail "no losses"
for v in "OMP_WAIT_POLICY=PASSIVE" "GOMP_SPINCOUNT=0" "OMP_NUM_THREADS=1" "threads_per_device=1"; do
  name=$(echo "$v" | tr -cd 'a-zA-Z0-9')
  case $v in
    threads_per_device=*) "${clean[@]}" "$bin" train "${tiny[@]}" steps=3 "$v" run_name=$name > "$work/$name.log" 2>&1 ;;
    *) "${clean[@]}" "$v" "$bin" train "${tiny[@]}" steps=3 threads_per_device=2 run_name=$name > "$work/$name.log" 2>&1 ;;
  esac || { cat "$work/$name.log"; fail "$v: train failed"; }
  losses "$name" | diff "$work/ref.loss" - || fail "$v: the losses differ"
done

# 4. exit codes as the parent sees them
rc=0; "${clean[@]}" "$bin" train "${tiny[@]}" steps=3 no_such_key=1 > /dev/null 2>&1 || rc=$?
echo "config $rc" > "$work/rc"
rc=0; "${clean[@]}" "$bin" > /dev/null 2>&1 || rc=$?
echo "usage $rc" >> "$work/rc"
rc=0; "${clean[@]}" GEMTRAIN_TEST_NAN_STEP=1 "$bin" train "${tiny[@]}" steps=3 run_name=nan > /dev/null 2>&1 || rc=$?
echo "nonfinite $rc" >> "$work/rc"
rc=0; "${clean[@]}" GEMTRAIN_TEST_SIGNAL_STEP=1 "$bin" train "${tiny[@]}" steps=3 run_name=sig > /dev/null 2>&1 || rc=$?
echo "signal $rc" >> "$work/rc"
"${clean[@]}" "$bin" train "${tiny[@]}" steps=100000 checkpoint_period=1000000 run_name=kill > "$work/kill.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q '^completed step: 0,' "$work/kill.log" && break; sleep 0.1; done
kill -KILL "$pid"
rc=0; { wait "$pid" || rc=$?; } 2> /dev/null
pid=""
echo "killed $rc" >> "$work/rc"
printf 'config 2\nusage 2\nnonfinite 4\nsignal 5\nkilled 137\n' | diff - "$work/rc" || fail "unexpected exit codes"

# 5. under mpirun (where there is one and the build has MPI): each rank
# starts once and trains
mpirun=${GT_MPIRUN:-$(command -v mpirun || true)}
if [ -n "$mpirun" ]; then
  flags=()
  if "$mpirun" --version 2> /dev/null | grep -qE "Open MPI|OpenRTE"; then
    flags=(--oversubscribe --bind-to none)
    [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  fi
  rc=0
  "${clean[@]}" OMP_DISPLAY_ENV=VERBOSE "$mpirun" "${flags[@]}" -np 2 "$bin" train "${tiny[@]}" steps=2 num_devices=1 \
    dcn_fsdp_parallelism=2 run_name=mpi > "$work/mpi.log" 2>&1 || rc=$?
  if grep -q "built without MPI" "$work/mpi.log"; then
    echo "e2e_threads: gemtrain built without MPI: the mpirun case skipped"
  else
    [ "$rc" = 0 ] || { cat "$work/mpi.log"; fail "mpirun -np 2: exit $rc"; }
    [ "$(starts "$work/mpi.log")" = 2 ] || { cat "$work/mpi.log"; fail "mpirun: $(starts "$work/mpi.log") starts for 2 ranks"; }
    grep -q '^completed step: 1,' "$work/mpi.log" || fail "mpirun: no training"
  fi
else
  echo "e2e_threads: no mpirun: the mpirun case skipped"
fi
echo "e2e_threads: ok"
