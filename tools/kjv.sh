#!/usr/bin/env bash
# Writes the King James Bible (public domain, Debian's bible-kjv) as plain
# text: the default training corpus. Usage: tools/kjv.sh [out.txt]
set -euo pipefail
out="${1:-data/kjv.txt}"
if [ -s "$out" ]; then exit 0; fi
mkdir -p "$(dirname "$out")"
bible -l10000 "Gen1:1-Rev22:21" > "$out.tmp"
mv "$out.tmp" "$out"
echo "kjv: wrote $out ($(wc -c < "$out") bytes)"
