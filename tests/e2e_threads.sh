#!/usr/bin/env bash
# End-to-end: gemtrain chooses its own OpenMP wait policy (tools/cli_threads.c,
# issue 18). With neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT in the
# environment it executes itself once more with GOMP_SPINCOUNT=1000, which
# libgomp itself must report (OMP_DISPLAY_ENV=VERBOSE prints its settings
# from its constructor, so each program start prints one block); a user's
# own setting wins and causes no second start; the running training process
# keeps its pid and has the variable (/proc/<pid>/environ); outputs, exit
# codes and signal handling are the same as with the variable set by hand;
# and it works under mpirun. No timing is checked.
# Usage: e2e_threads.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_threads.XXXXXX)
pid=""
cleanup() { if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# every OpenMP variable out of the way: the case of a user who set none
clean=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u GEMTRAIN_WAIT_REEXEC -u OMP_DISPLAY_ENV)
spins() { grep -o "GOMP_SPINCOUNT = '[0-9]*'" "$1" | grep -o "[0-9]*" | tr '\n' ' ' | sed 's/ $//'; }
policies() { grep -o "OMP_WAIT_POLICY = '[A-Z]*'" "$1" | grep -o "'[A-Z]*'" | tr -d "'" | tr '\n' ' ' | sed 's/ $//'; }

# 1. nothing set: libgomp starts twice, first with its default, then with ours
"${clean[@]}" OMP_DISPLAY_ENV=VERBOSE "$bin" --version > "$work/v.out" 2> "$work/v.err"
[ "$(spins "$work/v.err")" = "300000 1000" ] || { cat "$work/v.err"; fail "no re-exec with GOMP_SPINCOUNT=1000"; }
[ "$(cat "$work/v.out")" = "gemtrain $("${clean[@]}" GOMP_SPINCOUNT=1000 "$bin" --version | sed 's/^gemtrain //')" ] \
  || fail "--version printed differently"
[ "$(grep -c '^gemtrain ' "$work/v.out")" = 1 ] || fail "output printed twice"

# 2. the user's setting wins, whatever it is, and the program starts once
for u in GOMP_SPINCOUNT=5000 GOMP_SPINCOUNT=300000 OMP_WAIT_POLICY=ACTIVE OMP_WAIT_POLICY=PASSIVE; do
  "${clean[@]}" OMP_DISPLAY_ENV=VERBOSE "$u" "$bin" --version > /dev/null 2> "$work/u.err"
  n=$(grep -c "OPENMP DISPLAY ENVIRONMENT BEGIN" "$work/u.err")
  [ "$n" = 1 ] || fail "$u: the program started $n times"
  case $u in
    GOMP_SPINCOUNT=*) [ "$(spins "$work/u.err")" = "${u#GOMP_SPINCOUNT=}" ] || fail "$u was not kept" ;;
    OMP_WAIT_POLICY=*) [ "$(policies "$work/u.err")" = "${u#OMP_WAIT_POLICY=}" ] || fail "$u was not kept" ;;
  esac
done
# the loop guard: the mark of a re-exec alone stops another one
"${clean[@]}" OMP_DISPLAY_ENV=VERBOSE GEMTRAIN_WAIT_REEXEC=1000 "$bin" --version > /dev/null 2> "$work/g.err"
[ "$(spins "$work/g.err")" = "300000" ] || fail "executed again although GEMTRAIN_WAIT_REEXEC was set"

# 3. a running training process: the pid its parent started has our variable
tiny=(model_name=gemma3-tiny dataset_type=synthetic sample_tokens=0 eval_interval=0 "base_output_directory=$work/runs")
"${clean[@]}" "$bin" train "${tiny[@]}" steps=100000 checkpoint_period=1000000 run_name=long > "$work/long.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q '^completed step: 1,' "$work/long.log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/long.log"; fail "the training run ended early"; }
  sleep 0.1
done
grep -q '^completed step: 1,' "$work/long.log" || fail "the training run did not reach step 1"
tr '\0' '\n' < "/proc/$pid/environ" > "$work/environ"
grep -qx 'GOMP_SPINCOUNT=1000' "$work/environ" || fail "the running process lacks GOMP_SPINCOUNT=1000"
grep -qx 'GEMTRAIN_WAIT_REEXEC=1000' "$work/environ" || fail "the running process lacks the re-exec mark"
[ "$(readlink "/proc/$pid/exe")" = "$(readlink -f "$bin")" ] || fail "the running process is not gemtrain"
# signals reach the same process: SIGTERM stops the run cleanly (exit 0)
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
[ "$rc" = 0 ] || { tail -5 "$work/long.log"; fail "SIGTERM: exit $rc, expected 0"; }
grep -q 'SIGTERM' "$work/long.log" || fail "the run did not report the SIGTERM"

# 4. the same results and exit codes as with the policy set by hand
for who in auto user; do
  pre=("${clean[@]}"); [ $who = user ] && pre+=(GOMP_SPINCOUNT=1000)
  "${pre[@]}" "$bin" train "${tiny[@]}" steps=3 run_name=$who > "$work/$who.log" 2>&1 || fail "$who: train failed"
  rc=0; "${pre[@]}" "$bin" train "${tiny[@]}" steps=3 no_such_key=1 > "$work/$who.cfg" 2>&1 || rc=$?
  echo "config $rc" > "$work/$who.rc"
  rc=0; "${pre[@]}" "$bin" > /dev/null 2>&1 || rc=$?
  echo "usage $rc" >> "$work/$who.rc"
  rc=0; "${pre[@]}" GEMTRAIN_TEST_NAN_STEP=1 "$bin" train "${tiny[@]}" steps=3 run_name=nan$who > /dev/null 2>&1 || rc=$?
  echo "nonfinite $rc" >> "$work/$who.rc"
  rc=0; "${pre[@]}" GEMTRAIN_TEST_SIGNAL_STEP=1 "$bin" train "${tiny[@]}" steps=3 run_name=sig$who > /dev/null 2>&1 || rc=$?
  echo "signal $rc" >> "$work/$who.rc"
  # killed from outside: the shell sees the signal, not an exit
  "${pre[@]}" "$bin" train "${tiny[@]}" steps=100000 checkpoint_period=1000000 run_name=kill$who > "$work/kill.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q '^completed step: 0,' "$work/kill.log" && break; sleep 0.1; done
  kill -KILL "$pid"
  rc=0; { wait "$pid" || rc=$?; } 2> /dev/null
  pid=""
  echo "killed $rc" >> "$work/$who.rc"
done
diff "$work/auto.rc" "$work/user.rc" || fail "exit codes differ"
printf 'config 2\nusage 2\nnonfinite 4\nsignal 0\nkilled 137\n' | diff - "$work/auto.rc" || fail "unexpected exit codes"
diff "$work/auto.cfg" "$work/user.cfg" || fail "the refusal printed differently"
# every line but the timings, and the losses and gradient norms bit for bit
strip() { sed -E 's#(seconds|TFLOP/s/device|Tokens/s/device): [0-9.]+#\1: T#g; s#[0-9.]+ s\)#T s)#g; s#runs/[a-z]+#runs/R#g' "$1"; }
diff <(strip "$work/auto.log") <(strip "$work/user.log") || fail "the training output differs"
for f in auto user; do grep -o '"\(loss\|grad_norm\)": [0-9.e+-]*' "$work/runs/$f/metrics.jsonl" > "$work/$f.loss"; done
diff "$work/auto.loss" "$work/user.loss" || fail "the losses differ"
[ -s "$work/auto.loss" ] || fail "no losses"

# 5. under mpirun (where there is one and the build has MPI): each rank
# executes itself once and trains
mpirun=$(command -v mpirun || true)
if [ -n "$mpirun" ]; then
  flags=(--oversubscribe --bind-to none)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  rc=0
  "${clean[@]}" OMP_DISPLAY_ENV=VERBOSE "$mpirun" "${flags[@]}" -np 2 "$bin" train "${tiny[@]}" steps=2 num_devices=1 \
    dcn_fsdp_parallelism=2 run_name=mpi > "$work/mpi.log" 2>&1 || rc=$?
  if grep -q "built without MPI" "$work/mpi.log"; then
    echo "e2e_threads: gemtrain built without MPI: the mpirun case skipped"
  else
    [ "$rc" = 0 ] || { cat "$work/mpi.log"; fail "mpirun -np 2: exit $rc"; }
    [ "$(grep -c "GOMP_SPINCOUNT = '1000'" "$work/mpi.log")" = 2 ] || { cat "$work/mpi.log"; fail "mpirun: not every rank re-executed"; }
    [ "$(grep -c "GOMP_SPINCOUNT = '300000'" "$work/mpi.log")" = 2 ] || fail "mpirun: a rank started more than twice"
    grep -q '^completed step: 1,' "$work/mpi.log" || fail "mpirun: no training"
  fi
else
  echo "e2e_threads: no mpirun: the mpirun case skipped"
fi
echo "e2e_threads: ok"
