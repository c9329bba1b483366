#!/usr/bin/env bash
# Two ranks across a network against two ranks on one host, side by side in
# one run on this machine (docs/multi-host.md): the same training run of a
# 12-layer model (2 ranks x 1 device x 1 thread, dcn_fsdp_parallelism=2)
#  - across two network namespaces joined by a veth pair (Open MPI over TCP,
#    as tests/e2e_netns.sh sets them up: every collective crosses the veth);
#  - on one host over TCP on the loopback device (btl tcp,self);
#  - on one host over shared memory (btl vader,self, Open MPI's default
#    between ranks of one host);
# and prints, for each, the mean step time, the global tokens/s and the
# collectives' time over the step time (metrics.jsonl's comm_seconds /
# seconds; with prefetch that time partly runs beside the compute, so it is
# the collectives' cost, not the step's loss to them),
# steps after the first two. Takes the machine lock (/tmp/gt_machine.lock).
# Usage (as root): tools/bench_netns.sh [build/gemtrain] [key=value ...]
# (default model_name=gemma3-12l steps=6).
set -euo pipefail
if [ -z "${GT_BENCH_NETNS_LOCKED:-}" ]; then
  exec env GT_BENCH_NETNS_LOCKED=1 flock /tmp/gt_machine.lock bash "$0" "$@"
fi
bin=$(realpath "${1:-build/gemtrain}")
[ $# -gt 0 ] && shift
keys=("$@")
[ ${#keys[@]} -gt 0 ] || keys=(model_name=gemma3-12l steps=6)
[ "$(id -u)" = 0 ] || { echo "bench_netns: network namespaces need root"; exit 2; }
mpirun=$(command -v mpirun.openmpi || command -v mpirun)
tag=$$
nsa=gt-bench-$tag-a; nsb=gt-bench-$tag-b
ipa=10.214.$((tag % 256)).1; ipb=10.214.$((tag % 256)).2
dev=gtveth
out=$(mktemp -d /tmp/gt_bench_netns.XXXXXX)
cleanup() {
  for ns in "$nsa" "$nsb"; do
    if [ -e "/run/netns/$ns" ]; then
      for p in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$p" 2> /dev/null || true; done
      ip netns del "$ns" 2> /dev/null || true
    fi
  done
  rm -rf "$out"
}
trap cleanup EXIT
ip netns add "$nsa"
ip netns add "$nsb"
ip link add "$dev" netns "$nsa" type veth peer name "$dev" netns "$nsb"
ip -n "$nsa" addr add "$ipa/30" dev "$dev"
ip -n "$nsb" addr add "$ipb/30" dev "$dev"
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; ip -n "$ns" link set "$dev" up; done
cat > "$out/agent.sh" << EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $ipa) ns=$nsa ;;
  $ipb) ns=$nsb ;;
  *) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$out/agent.sh"
printf '%s slots=1\n%s slots=1\n' "$ipa" "$ipb" > "$out/hostfile"
export OMP_WAIT_POLICY=PASSIVE
base=(--allow-run-as-root -np 2 --bind-to none --mca pml ob1)
run=(train "${keys[@]}" dataset_type=synthetic num_devices=1 threads_per_device=1 dcn_fsdp_parallelism=2
     enable_checkpointing=false eval_interval=-1 sample_tokens=0 "base_output_directory=$out/runs")
echo "== across two namespaces (veth, TCP) =="
ip netns exec "$nsa" "$mpirun" "${base[@]}" --hostfile "$out/hostfile" --mca plm_rsh_agent "$out/agent.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include "$dev" --mca oob_tcp_if_include "$dev" \
  "$bin" "${run[@]}" run_name=veth | grep -E "^(mesh|completed step)"
echo "== one host, TCP over loopback =="
"$mpirun" "${base[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo "$bin" "${run[@]}" run_name=lo |
  grep -E "^completed step"
echo "== one host, shared memory =="
"$mpirun" "${base[@]}" --mca btl vader,self "$bin" "${run[@]}" run_name=shm | grep -E "^completed step"
echo
python3 - "$out/runs" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" << 'PY'
import json, sys
d = sys.argv[1]
print(f"summary (one run of this script; {sys.argv[2]} cores,{sys.argv[3]}; steps after the first two):")
print("| 2 ranks x 1 device | step s | tokens/s | TFLOP/s/device | collectives s | share | MiB to the other rank / step |")
print("|---|---|---|---|---|---|---|")
res = {}
for name, what in (("veth", "two namespaces, veth (TCP)"), ("lo", "one host, TCP loopback"),
                   ("shm", "one host, shared memory")):
    m = [json.loads(l) for l in open(f"{d}/{name}/metrics.jsonl")][2:]
    s = sum(x["seconds"] for x in m) / len(m)
    c = sum(x["comm_seconds"] for x in m) / len(m)
    tok = sum(x["tokens_per_s_per_device"] for x in m) / len(m) * 2
    tf = sum(x["tflops_per_s_per_device"] for x in m) / len(m)
    res[name] = tok
    print(f"| {what} | {s:.3f} | {tok:.1f} | {tf:.4f} | {c:.3f} | {100 * c / s:.1f}% | {m[0]['comm_bytes_dcn'] / 2**20:.1f} |")
print(f"veth / shared memory: {res['veth'] / res['shm']:.3f}x tokens/s; veth / loopback TCP: {res['veth'] / res['lo']:.3f}x")
PY
