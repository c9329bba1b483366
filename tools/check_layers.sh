#!/bin/sh
# Fails when an include climbs a layer: scans every `#include "dir/..."`
# (and <dir/...> naming a layer) in src/, kernels/ and tools/ of the tree at
# ROOT (default: this script's tree) against the order in
# ROOT/tools/layers.txt and names file, line, include and both layers of
# each climb. Exit 0: none; 1: climbs found;
# 2: the order file or an include could not be placed.
#   usage: check_layers.sh [ROOT]
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
order=$root/tools/layers.txt
[ -r "$order" ] || { echo "check_layers: cannot read $order" >&2; exit 2; }
cd "$root"
files=$(find src kernels tools -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort)
[ -n "$files" ] || { echo "check_layers: no sources under $root" >&2; exit 2; }
# shellcheck disable=SC2086
awk -v order="$order" '
BEGIN {
  n = 0
  while ((getline line < order) > 0) {
    sub(/#.*/, "", line)
    k = split(line, w, /[ \t]+/)
    i = 1; while (i <= k && w[i] == "") i++
    if (i > k) continue
    if (w[i] == "allow") { allowed[w[i+1] " " w[i+2]] = 1; continue }
    if (w[i] in rank) { printf "%s: layer %s listed twice\n", order, w[i]; bad = 2 }
    rank[w[i]] = n++
  }
  close(order)
  if (n == 0) { printf "%s: no layers\n", order; bad = 2 }
}
FNR == 1 {
  # the layer of this file: src/<name>/..., kernels/... or tools/...
  split(FILENAME, p, "/")
  layer = (p[1] == "src") ? p[2] : p[1]
  if (!(layer in rank)) {
    printf "%s: layer %s is not in %s\n", FILENAME, layer, order; bad = 2
  }
}
/^[ \t]*#[ \t]*include[ \t]*[<"]/ {
  inc = $0
  sub(/^[^<"]*[<"]/, "", inc)
  angle = $0 ~ /include[ \t]*</
  sub(/[>"].*/, "", inc)
  shown = angle ? "<" inc ">" : "\"" inc "\""
  if (inc !~ /\//) next                      # beside its source, or a system header
  if (inc ~ /^gemtrain\//) next              # public headers: usable by all
  split(inc, q, "/")
  to = q[1]
  if (angle && !(to in rank)) next           # <cjson/cJSON.h>, <sys/stat.h>
  if (!(to in rank) || inc ~ /\.\./) {
    printf "%s:%d: #include %s: %s is not a layer in %s\n", FILENAME, FNR, shown, to, order
    bad = 2; next
  }
  if (!(layer in rank) || rank[to] <= rank[layer]) next
  if ((FILENAME " " inc) in allowed) { seen[FILENAME " " inc] = 1; next }
  printf "%s:%d: #include %s climbs from layer %s (%d) to layer %s (%d)\n", \
         FILENAME, FNR, shown, layer, rank[layer] + 1, to, rank[to] + 1
  climbs++
}
END {
  for (e in allowed) if (!(e in seen))
    printf "note: allowed edge %s is gone; remove it from %s\n", e, order
  if (bad) exit bad
  if (climbs) { printf "%d include(s) climb a layer; the order is in %s\n", climbs, order; exit 1 }
}' $files
