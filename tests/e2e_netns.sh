#!/usr/bin/env bash
# Two ranks on two network "hosts" (docs/multi-host.md): two network
# namespaces of this machine joined by a veth pair, each with its own address
# on a /30 of its own, one rank in each, Open MPI over TCP only (pml ob1,
# btl tcp,self: no shared memory between the ranks), its daemons started
# without ssh by an rsh agent that enters the other namespace. It shows:
#  1. the same global mesh gives the same run across the link as in one
#     process: 2 ranks x 1 device (one per namespace) = 1 process x 2
#     devices, every step's printed loss, lm_loss, grad_norm and eval loss
#     and the final weights and AdamW moments byte for byte; and the
#     collectives' bytes did cross the link (the veth's counters);
#  2. the link taken down mid-run (after a checkpoint was committed) ends the
#     job with exit status 1, rank 0 naming rank 1 and the
#     collective_timeout_seconds it waited, its line at most that timeout
#     + 15 s after the link went down (the job ends well before a default
#     timeout would have);
#  3. the rerun with the link up again resumes from the last committed
#     checkpoint and finishes bit for bit as a run that was never cut.
# Usage: e2e_netns.sh <gemtrain> <src>. Exits 77 (skipped), saying why, where
# namespaces cannot be made (not root, no `ip`, no netns or veth support), or
# without MPI in gemtrain or its launcher. The same with a gemtrain built
# against MPICH (-DGT_MPI=mpich): Hydra, its daemons (hydra_pmi_proxy)
# started by the same agent, TCP over the veth.
set -euo pipefail
bin="$1"; src="$2"
skip() { echo "e2e_netns: $*: skipped"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
command -v ip > /dev/null || skip "no 'ip' command (Debian's iproute2)"
libs=$(ldd "$bin" 2> /dev/null || true)
case "$libs" in
  *libmpich*)
    flavor=mpich
    mpirun=$(command -v mpiexec.hydra || true)
    [ -n "$mpirun" ] || skip "no mpiexec.hydra (Debian's mpich) for a gemtrain built against MPICH" ;;
  *libmpi.so*)
    flavor=openmpi
    mpirun=$(command -v mpirun.openmpi || true)
    if [ -z "$mpirun" ] && mpirun --version 2> /dev/null | grep -qE "Open MPI|OpenRTE"; then mpirun=$(command -v mpirun); fi
    [ -n "$mpirun" ] || skip "no Open MPI mpirun (openmpi-bin)" ;;
  *) skip "gemtrain is built without MPI" ;;
esac

# Names and addresses of this run's own: the pid is unique among the tests
# running now, and ip netns names and the /30 follow from it
tag=$$
nsa=gt-netns-$tag-a
nsb=gt-netns-$tag-b
o2=$(((tag >> 6) % 256)); o3=$(((tag % 64) * 4))
ipa=10.213.$o2.$((o3 + 1)); ipb=10.213.$o2.$((o3 + 2))
dev=gtveth
work=$(mktemp -d /tmp/gt_e2e_netns.XXXXXX)
cleanup() {
  # every process left in the namespaces is one this test started (a rank or
  # Open MPI's daemon); deleting a namespace deletes its end of the veth pair
  for ns in "$nsa" "$nsb"; do
    if [ -e "/run/netns/$ns" ]; then
      for p in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$p" 2> /dev/null || true; done
      ip netns del "$ns" 2> /dev/null || true
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$nsa" 2> "$work/ns.err" || skip "cannot make a network namespace ($(head -1 "$work/ns.err"))"
ip netns add "$nsb" 2> "$work/ns.err" || skip "cannot make a network namespace ($(head -1 "$work/ns.err"))"
ip link add "$dev" netns "$nsa" type veth peer name "$dev" netns "$nsb" 2> "$work/ns.err" ||
  skip "cannot make a veth pair ($(head -1 "$work/ns.err"))"
ip -n "$nsa" addr add "$ipa/30" dev "$dev"
ip -n "$nsb" addr add "$ipb/30" dev "$dev"
for ns in "$nsa" "$nsb"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$dev" up
  # A TCP connection with data in flight gives up after tcp_retries2
  # retransmissions, 15 by default (about 15 minutes): mpirun, told by rank 0
  # to end the job, waits that long for the unreachable daemon to confirm.
  # 5 (about 13 s) in these namespaces only, as a cluster would set it
  # (docs/multi-host.md); the ranks' own waits are bounded by
  # collective_timeout_seconds whatever this is.
  ip netns exec "$ns" sh -c 'echo 5 > /proc/sys/net/ipv4/tcp_retries2' 2> "$work/ns.err" ||
    skip "cannot set net.ipv4.tcp_retries2 in a namespace ($(head -1 "$work/ns.err"))"
done

# The launcher's rsh agent: "<host> <command>" runs the command (Open MPI's
# daemon orted, or MPICH's hydra_pmi_proxy) in that host's namespace; the
# launcher itself runs in namespace a
cat > "$work/agent.sh" << EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $ipa) ns=$nsa ;;
  $ipb) ns=$nsb ;;
  *) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$work/agent.sh"
if [ "$flavor" = openmpi ]; then
  printf '%s slots=1\n%s slots=1\n' "$ipa" "$ipb" > "$work/hostfile"
  launch=("$mpirun" --allow-run-as-root --hostfile "$work/hostfile" -np 2 --bind-to none
          --mca plm_rsh_agent "$work/agent.sh" --mca pml ob1 --mca btl tcp,self
          --mca btl_tcp_if_include "$dev" --mca oob_tcp_if_include "$dev")
else
  # MPIR_CVAR_NOLOCAL: MPICH takes ranks that report the same host name (the
  # namespaces share this machine's) for neighbours and would join them by
  # shared memory; UCX (MPICH's transport) is held to TCP on the veth too.
  # Neither is wanted between two real machines.
  printf '%s:1\n%s:1\n' "$ipa" "$ipb" > "$work/hostfile"
  launch=("$mpirun" -launcher rsh -launcher-exec "$work/agent.sh" -f "$work/hostfile" -n 2 -iface "$dev"
          -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES "$dev")
fi
# <log> <args...>: 2 ranks, one per namespace, in the foreground (bounded: a
# hang fails the test instead of holding ctest)
mpi2() { local log=$1; shift; timeout -k 10 600 ip netns exec "$nsa" "${launch[@]}" "$bin" "$@" > "$log" 2>&1; }
rx_bytes() { ip -n "$1" -s -j link show "$dev" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["rx"]["bytes"])'; }

"$src/tools/kjv.sh" "$work/kjv.txt" > /dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
common=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" eval_interval=5 eval_steps=2
        sample_tokens=0 checkpoint_compression=0 save_checkpoint_on_completion=true learning_rate_schedule_steps=200
        "base_output_directory=$work/runs")
two=(num_devices=1 dcn_fsdp_parallelism=2)

# compare <run a> <run b> [eval]: the metrics of every step (with their eval
# losses unless the third word is noeval) and the final state
compare() {
  PYTHONPATH="$src/tests" python3 - "$work/runs/$1" "$work/runs/$2" "${3:-eval}" <<'PY' || fail "$1 and $2 differ"
import sys, gt_runs
keys = ("step", "loss", "lm_loss", "grad_norm", "total_weights", "learning_rate")
print(gt_runs.same_run(sys.argv[1], sys.argv[2], keys + (("eval_loss",) if sys.argv[3] == "eval" else ())))
PY
}

# 1. across the link = in one process
rx0=$(rx_bytes "$nsb")
mpi2 "$work/ns.log" train "${common[@]}" steps=10 "${two[@]}" run_name=ns ||
  { cat "$work/ns.log"; fail "2 ranks in two namespaces"; }
grep -q "^mesh: 2 ranks x 1 device per rank = 2 devices; data 1 (dcn 1 x ici 1), fsdp 2 (dcn 2 x ici 1)" \
  "$work/ns.log" || { cat "$work/ns.log"; fail "no 2-rank mesh line"; }
rx1=$(rx_bytes "$nsb")
"$bin" train "${common[@]}" steps=10 num_devices=2 run_name=one > "$work/one.log" 2>&1 ||
  { cat "$work/one.log"; fail "1 process x 2 devices"; }
compare ns one
# every byte rank 1 received from rank 0 (its device's comm_bytes_dcn per
# step: 1 device per rank, so all of comm_bytes) came through namespace b's
# end of the veth, with the TCP/IP headers and Open MPI's own messages on top
python3 - "$work/runs/ns/metrics.jsonl" "$rx0" "$rx1" << 'PY' || fail "the collectives did not cross the veth"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
rx = int(sys.argv[3]) - int(sys.argv[2])
dcn = sum(s["comm_bytes_dcn"] for s in m)
assert all(s["comm_bytes_dcn"] == s["comm_bytes"] > 0 for s in m), m[0]
assert rx >= dcn, (rx, dcn)
print(f"veth: {rx} bytes into namespace b for {dcn} bytes of collectives over {len(m)} steps")
PY

# 2. the link goes down mid-run, after a checkpoint was committed (the latest
#    pointer is the commit, whenever the files were written)
rm -f "$work/down.rc"
# each output line is written to cut.log with the time it arrived
# (cut.ts: "seconds line"), so the timeout line's time can be set against the
# link going down
( set +e
  timeout -k 10 300 ip netns exec "$nsa" "${launch[@]}" "$bin" train "${common[@]}" steps=100000 \
    checkpoint_period=2 collective_timeout_seconds=3 "${two[@]}" run_name=cut 2>&1 |
    python3 -u -c 'import sys, time
ts = open(sys.argv[1], "w")
for l in sys.stdin:
    ts.write("%.3f %s" % (time.time(), l)); ts.flush(); sys.stdout.write(l)' "$work/cut.ts" > "$work/cut.log"
  echo "${PIPESTATUS[0]}" > "$work/down.rc" ) &
waiter=$!
for _ in $(seq 1 1200); do
  [ -f "$work/runs/cut/checkpoints/latest" ] && [ -f "$work/runs/cut/metrics.jsonl" ] &&
    [ "$(wc -l < "$work/runs/cut/metrics.jsonl")" -ge 4 ] && break
  [ -f "$work/down.rc" ] && { cat "$work/cut.log"; fail "the run ended before the link went down"; }
  sleep 0.25
done
[ -f "$work/runs/cut/checkpoints/latest" ] || { cat "$work/cut.log"; fail "no checkpoint committed in 300 s"; }
ip -n "$nsb" link set "$dev" down
t0=$(date +%s)
down=$(date +%s.%N)
wait "$waiter"
elapsed=$(($(date +%s) - t0))
rc=$(cat "$work/down.rc")
# exit status 1 (docs/training.md: any other error; the MPI_Abort code)
[ "$rc" = 1 ] || { cat "$work/cut.log"; fail "link down: the launcher exited $rc, expected 1"; }
# (the wait that notices may be a step's collective or a checkpoint's
# commit, and may miss data from rank 1, or rank 1's taking of ours, or both)
msg=$(grep "^gemtrain: rank 0 of 2: .*rank 1.* within 3 s (collective_timeout_seconds); is rank 1 alive?$" \
  "$work/cut.log") || { cat "$work/cut.log"; fail "link down: rank 0 does not name rank 1 and the timeout"; }
# 3 s for the collective, then (Open MPI) the abort's ~13 s for mpirun to give
# up on the other daemon (tcp_retries2 above; Hydra does not wait); 90 s
# leaves room for a busy machine, and stays far below the 300 s default
# timeout, or the 15 minutes of a stock tcp_retries2
[ "$elapsed" -le 90 ] || fail "link down: the job took ${elapsed} s to end"
# rank 0's wait ended within the timeout of the link going down: its line
# came at most 3 s (collective_timeout_seconds) + 15 s (a busy machine's
# scheduling and the pipe) after it; the default 300 s would be far later.
# (A wait already running when the link went down ends sooner, never later.)
said=$(grep -m1 " gemtrain: rank 0 of 2: .*within 3 s (collective_timeout_seconds)" "$work/cut.ts" | cut -d' ' -f1)
[ -n "$said" ] || fail "link down: no timed timeout line in $work/cut.ts"
waited=$(awk -v a="$down" -v b="$said" 'BEGIN { printf "%.1f", b - a }')
awk -v w="$waited" 'BEGIN { exit !(w >= 0 && w <= 3 + 15) }' ||
  fail "link down: rank 0 said it timed out ${waited} s after the link went down (expected 0 .. 18 s: a 3 s timeout)"
echo "link down ($flavor): the job ended in ${elapsed} s with exit status $rc, rank 0's timeout line ${waited} s after the link went down: ${msg#gemtrain: }"
# the cut-off side ends by itself too (rank 1 by its own timeout, then its
# daemon), before the link comes back
for _ in $(seq 1 240); do [ -z "$(ip netns pids "$nsb")" ] && break; sleep 0.5; done
[ -z "$(ip netns pids "$nsb")" ] || { ps -o pid,etime,args -p "$(ip netns pids "$nsb" | paste -sd,)"; fail "link down: rank 1's side still runs after 120 s"; }
committed=$(cat "$work/runs/cut/checkpoints/latest")
grep -q "^completed step: " "$work/cut.log" || fail "link down: no step ran"

# 3. the link up again: the same command resumes from the committed
#    checkpoint; run to 4 steps past it, it equals a run that never stopped
ip -n "$nsb" link set "$dev" up
n=$((10#${committed#step_} + 4))
mpi2 "$work/rerun.log" train "${common[@]}" steps=$n checkpoint_period=2 collective_timeout_seconds=3 "${two[@]}" \
  run_name=cut || { cat "$work/rerun.log"; fail "the rerun"; }
grep -q "^resumed from .*$committed" "$work/rerun.log" || { cat "$work/rerun.log"; fail "the rerun did not resume $committed"; }
"$bin" train "${common[@]}" steps=$n checkpoint_period=2 num_devices=2 run_name=whole > "$work/whole.log" 2>&1 ||
  { cat "$work/whole.log"; fail "the uninterrupted run"; }
# (a resumed run makes no eval after its first step, as MaxText's loop:
# docs/training.md; the step it resumed at may be one the straight run
# evaluated after, so the eval losses are left out of this comparison)
compare cut whole noeval
echo "e2e_netns: 1 passed, 0 failed"
